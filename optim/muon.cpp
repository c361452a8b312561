#include "optim/muon.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/dispatch.h"
#include "core/enum_names.h"
#include "core/error.h"
#include "core/field_kinds.h"
#include "core/json_args.h"
#include "core/json_limits.h"

namespace minidl {

namespace {
constexpr const char* kRest = "rest.";
constexpr int64_t kMaxInterval = 1000000000;
// The scalar table's row of a filter bank: its lr, whether this step renormalizes (1 or 0), and
// the decoupled weight decay's factor 1 - lr * weight_decay.
constexpr int kScalars = 3;
}

enum class NsDtype { Float32, BFloat16 };
template <>
struct EnumNames<NsDtype> {
  static constexpr EnumName<NsDtype> values[] = {{NsDtype::Float32, "float32"}, {NsDtype::BFloat16, "bfloat16"}};
};

namespace {

// The Newton-Schulz settings live in the kernels' own struct: rows with their own readers.
std::vector<Field<MuonOptions>> newton_schulz_fields() {
  using O = MuonOptions;
  const kernels::NewtonSchulz d;
  Field<O> steps = custom_field<O>("ns_steps", "int", d.steps, "0..100", "Newton-Schulz iterations");
  steps.read = [d](JsonArgs& a, const std::string& key, O& o) {
    o.ns.steps = static_cast<int>(a.get_int(key, d.steps, 0, 100));
  };
  steps.write = [](const O& o) { return std::optional<nlohmann::json>(o.ns.steps); };
  Field<O> coefficients = custom_field<O>("ns_coefficients", "floats", nlohmann::json::array({d.a, d.b, d.c}), "",
                                          "the quintic's coefficients [a, b, c], as float32");
  coefficients.read = [d](JsonArgs& a, const std::string& key, O& o) {
    o.ns.a = d.a;
    o.ns.b = d.b;
    o.ns.c = d.c;
    if (!a.has(key)) return;
    const nlohmann::json& c = a.get_json(key);
    MINIDL_CHECK(c.is_array() && c.size() == 3 && c[0].is_number() && c[1].is_number() && c[2].is_number(),
                 a.key_path(key), ": expected three numbers [a, b, c], got ", c.dump());
    o.ns.a = c[0].get<float>();
    o.ns.b = c[1].get<float>();
    o.ns.c = c[2].get<float>();
  };
  coefficients.write = [](const O& o) {
    return std::optional<nlohmann::json>(nlohmann::json::array({o.ns.a, o.ns.b, o.ns.c}));
  };
  // Checked as a double, in float32's terms: a larger value would become an infinite float (saved
  // as null, never resumable), one below float32's smallest normal number 0 or subnormal (flushed
  // to 0), and the first step would divide by 0.
  const Interval eps_range{0, true, 1, false};
  const float smallest = std::numeric_limits<float>::min();
  Field<O> eps = custom_field<O>("ns_eps", "float", d.eps, str(eps_range.text(), ", at least ", smallest),
                                 "X0 = G / (||G||_F + ns_eps), as float32");
  eps.read = [d, eps_range, smallest](JsonArgs& a, const std::string& key, O& o) {
    const double v = a.get_float(key, d.eps);
    if (!eps_range.contains(v)) fail_range(a, key, "a number", eps_range.text(), str(v));
    MINIDL_CHECK(v >= smallest, a.key_path(key), ": expected 0 < ns_eps <= 1 and at least ", smallest,
                 " (float32's smallest normal number), got ", v);
    o.ns.eps = static_cast<float>(v);
  };
  eps.write = [](const O& o) { return std::optional<nlohmann::json>(o.ns.eps); };
  Field<O> dtype = custom_field<O>("ns_dtype", "string", "float32", enum_choices<NsDtype>(),
                                   "the iterates' type (bfloat16: the GEMMs in bf16, as airbench)");
  dtype.read = [](JsonArgs& a, const std::string& key, O& o) {
    o.ns.bf16 = from_string<NsDtype>(a.get_string(key, "float32"), a.key_path(key)) == NsDtype::BFloat16;
  };
  dtype.write = [](const O& o) {
    return std::optional<nlohmann::json>(to_string(o.ns.bf16 ? NsDtype::BFloat16 : NsDtype::Float32));
  };
  return {steps, coefficients, eps, dtype};
}

// "normalize_interval": n, or [start, end] growing over the run; written back only when not 1.
Field<MuonOptions> normalize_interval_field() {
  using O = MuonOptions;
  Field<O> f = written_when_set(
      custom_field<O>("normalize_interval", "ints", 1, str("1..", kMaxInterval, " or [start, end]"),
                      "renormalize every n-th step, or at an interval growing from start to end over the run "
                      "(needs normalize_weights)"));
  f.read = [](JsonArgs& a, const std::string& key, O& o) {
    o.normalize_interval[0] = o.normalize_interval[1] = 1;
    if (!a.has(key)) return;
    const nlohmann::json& v = a.get_json(key);
    const std::string where = a.key_path(key);
    const auto whole = [](const nlohmann::json& x) { return x.is_number_integer() && x.get<int64_t>() >= 1; };
    MINIDL_CHECK(whole(v) || (v.is_array() && v.size() == 2 && whole(v[0]) && whole(v[1])), where,
                 ": expected a whole number of steps >= 1, or [start, end] (e.g. [2, 17]), got ", json_excerpt(v));
    o.normalize_interval[0] = v.is_array() ? v[0].get<int64_t>() : v.get<int64_t>();
    o.normalize_interval[1] = v.is_array() ? v[1].get<int64_t>() : v.get<int64_t>();
    MINIDL_CHECK(o.normalize_interval[0] <= kMaxInterval && o.normalize_interval[1] <= kMaxInterval, where,
                 ": expected at most ", kMaxInterval, " steps, got ", json_excerpt(v));
  };
  f.write = [](const O& o) {
    const int64_t start = o.normalize_interval[0], end = o.normalize_interval[1];
    return std::optional<nlohmann::json>(start == end ? nlohmann::json(start) : nlohmann::json({start, end}));
  };
  return f;
}

}  // namespace

// Muon's published defaults: lr 0.02, momentum 0.95 with Nesterov, 3 quintic iterations. The keys
// the record added (weight_decay, normalize_interval, ns_batching) are written only when set, so
// an older config resolves as it did.
const Fields<MuonOptions>& MuonOptions::fields() {
  using O = MuonOptions;
  static const Fields<O> f{
      [] {
        std::vector<Field<O>> rows = {
            number("lr", &O::lr, 0.02, kAtLeastZero, "the learning rate; the schedule's factor multiplies it"),
            number("momentum", &O::momentum, 0.95, {0, false, 1, true}, "momentum factor"),
            flag("nesterov", &O::nesterov, true, "Nesterov momentum")};
        for (Field<O>& r : newton_schulz_fields()) rows.push_back(r);
        rows.push_back(flag("normalize_weights", &O::normalize_weights, false,
                            "rescale each filter to Frobenius norm sqrt(rows) before the step"));
        rows.push_back(written_when_set(number("weight_decay", &O::weight_decay, 0, kAtLeastZero,
                                               "decoupled weight decay: W *= 1 - lr * weight_decay before the update "
                                               "(torch.optim.Muon's order)")));
        rows.push_back(normalize_interval_field());
        rows.push_back(written_when_set(choice("ns_batching", &O::ns_batching, NsBatching::ByShape,
                                               "iterate the banks of each shape together, or every bank zero-padded "
                                               "into one batch (fewer launches on the GPU)")));
        Field<O> rest = custom_field<O>("rest", "object", nullptr, "\"SGD\" or \"AdamW\"",
                                        "the optimizer (its config object) of the parameters that are not 4-D "
                                        "filters; required when there are any");
        rest.required = false;
        rest.read = [](JsonArgs& a, const std::string& key, O& o) {
          o.rest = nullptr;
          if (!a.has(key)) return;
          o.rest = a.get_json(key);
          MINIDL_CHECK(!(o.rest.is_object() && o.rest.value("type", "") == "Muon"), a.key_path(key),
                       ": the rest optimizer cannot be Muon");
        };
        // Written back by Muon::to_json, as the rest optimizer it built prints itself.
        rest.write = [](const O&) { return std::optional<nlohmann::json>(); };
        rows.push_back(rest);
        return rows;
      }(),
      [](const O& o, const JsonArgs& args) {
        MINIDL_CHECK(o.normalize_weights || (o.normalize_interval[0] == 1 && o.normalize_interval[1] == 1),
                     args.key_path("normalize_interval"),
                     ": renormalizes the weights, which needs \"normalize_weights\": true");
      }};
  return f;
}

Muon::Muon(std::vector<NamedParam> filters, MuonOptions options, std::unique_ptr<Optimizer> rest,
           const std::string& path)
    : GroupedOptimizer("Muon", std::move(filters), {}, 0.0, {"momentum_buffer"}, kScalars, path),
      options_(options),
      rest_(std::move(rest)) {
  for (const NamedParam& p : params_)
    MINIDL_CHECK(p.tensor.dim() == 4 && p.tensor.numel() > 0, path, ": Muon updates non-empty 4-D filters, '",
                 p.name, "' is ", shape_str(p.tensor.shape()));
}

// The lr goes through the scalar table, so a replayed CUDA graph reads each step's value.
void Muon::prepare(double lr) {
  if (rest_) rest_->prepare(options_.lr > 0 ? lr * rest_->base_lr() / options_.lr : 0.0);
  const float renormalize = options_.normalize_weights && renormalizes() ? 1.f : 0.f;
  for (size_t i = 0; i < params_.size(); ++i) {
    float* row = scalar_row(i);
    row[0] = static_cast<float>(lr);
    row[1] = renormalize;
    row[2] = static_cast<float>(1.0 - lr * options_.weight_decay);
    count_step(i);
  }
  upload_scalars();
}

bool Muon::renormalizes() {
  const int64_t start = options_.normalize_interval[0], end = options_.normalize_interval[1];
  if (start == 1 && end == 1) return true;
  const int64_t c = position("Muon's normalize_interval").step + 1;
  if (start == end) return c % start == 0;
  // A pure function of c, walked from the start (again after a jump back, e.g. a resume).
  if (c <= walked_) walked_ = last_renormalized_ = 0;
  const double total = static_cast<double>(position_.total_steps);
  bool renormalized = false;
  for (int64_t k = walked_ + 1; k <= c; ++k) {
    const double interval =
        static_cast<double>(start) + std::floor(static_cast<double>(end - start) * (static_cast<double>(k) / total));
    renormalized = static_cast<double>(k - last_renormalized_) >= interval;
    if (renormalized) last_renormalized_ = k;
  }
  walked_ = c;
  return renormalized;
}

void Muon::apply() {
  if (rest_) rest_->apply();
  const std::vector<size_t> active = params_with_grad();
  count_steps(active, {});
  if (active.empty()) return;
  std::vector<kernels::MuonBank> banks;
  for (size_t i : active) {
    Tensor& p = params_[i].tensor;
    const int64_t rows = p.size(0);
    banks.push_back({p.grad().data<float>(), entries_[i].slots[0].data<float>(), p.data<float>(), rows,
                     p.numel() / rows, scalar_table() + i * kScalars});
  }
  kernels::MuonStepArgs args;
  args.momentum = static_cast<float>(options_.momentum);
  args.nesterov = options_.nesterov ? 1 : 0;
  args.normalize = options_.normalize_weights ? 1 : 0;
  args.ns = options_.ns;
  args.padded = options_.ns_batching == NsBatching::Padded ? 1 : 0;
  args.skip = skip_flag();
  dispatch(
      params_device(), "muon_step", [&] { kernels::muon_step_cpu(banks, args); },
      [&] { kernels::muon_step_cuda(banks, args); });
}

void Muon::zero_grad() {
  Optimizer::zero_grad();
  if (rest_) rest_->zero_grad();
}

std::vector<std::pair<std::string, Tensor>> Muon::state_tensors() const {
  std::vector<std::pair<std::string, Tensor>> out = GroupedOptimizer::state_tensors();
  if (rest_)
    for (auto& [name, t] : rest_->state_tensors()) out.emplace_back(kRest + name, t);
  return out;
}

nlohmann::json Muon::state_scalars() const {
  nlohmann::json j = GroupedOptimizer::state_scalars();
  if (rest_) j["rest"] = rest_->state_scalars();
  return j;
}

void Muon::load_state(const std::vector<std::pair<std::string, Tensor>>& tensors, const nlohmann::json& scalars) {
  std::vector<std::pair<std::string, Tensor>> own, rest;
  for (const auto& [name, t] : tensors) {
    if (name.rfind(kRest, 0) == 0)
      rest.emplace_back(name.substr(std::string(kRest).size()), t);
    else
      own.emplace_back(name, t);
  }
  MINIDL_CHECK(scalars.is_object() && (scalars.contains("rest") == static_cast<bool>(rest_)),
               "Muon: the saved state ", rest_ ? "lacks" : "has", " the state of the \"rest\" optimizer");
  nlohmann::json mine = scalars;
  mine.erase("rest");
  if (rest_) rest_->load_state(rest, scalars["rest"]);
  GroupedOptimizer::load_state(own, mine);
}

void Muon::set_skip_flag(const float* found_inf) {
  GroupedOptimizer::set_skip_flag(found_inf);
  if (rest_) rest_->set_skip_flag(found_inf);
}

void Muon::set_position(const StepPosition& at) {
  Optimizer::set_position(at);
  if (rest_) rest_->set_position(at);
}

void Muon::to(Device device) {
  GroupedOptimizer::to(device);
  if (rest_) rest_->to(device);
}

nlohmann::json Muon::to_json() const {
  nlohmann::json j = optimizer_json(muon_optimizer(), options_);
  if (rest_) j["rest"] = rest_->to_json();
  return j;
}

double Muon::flops_per_element() const {
  return (options_.nesterov ? 4 : 2) + 2 + (options_.weight_decay != 0 ? 1 : 0) + (options_.normalize_weights ? 3 : 0);
}

// Each filter as a matrix r x c, r <= c (the wide orientation the kernels take): the scaling by
// its norm (3 FLOPs an element), then per iteration X X^T (2 r^2 c), A A (2 r^3), b A + c A^2
// (3 r^2), B X (2 r^2 c) and a X + B X (2 r c); each product's operands read and its output
// written once, in the iterates' type.
std::optional<LayerWork> Muon::work() const {
  std::optional<LayerWork> w = GroupedOptimizer::work();
  const double elem = options_.ns.bf16 ? 2 : 4, steps = options_.ns.steps;
  for (const NamedParam& p : params_) {
    if (!p.tensor.grad().defined()) continue;
    const double rows = static_cast<double>(p.tensor.size(0)), cols = static_cast<double>(p.tensor.numel()) / rows;
    const double r = std::min(rows, cols), c = std::max(rows, cols);
    w->forward.flops += 3 * r * c + steps * (4 * r * r * c + 2 * r * r * r + 3 * r * r + 2 * r * c);
    w->forward.bytes += steps * (6 * r * c + 7 * r * r) * elem;
  }
  if (rest_) {
    const std::optional<LayerWork> rest = rest_->work();
    if (!rest) return std::nullopt;
    w->forward.flops += rest->forward.flops;
    w->forward.bytes += rest->forward.bytes;
  }
  return w;
}

namespace {

std::unique_ptr<Optimizer> make_muon(JsonArgs& args, std::vector<NamedParam> params, const std::string& path) {
  MuonOptions o = read_struct(MuonOptions::fields(), args);
  std::vector<NamedParam> filters, others;
  for (NamedParam& p : params) (p.tensor.dim() == 4 ? filters : others).push_back(std::move(p));
  std::unique_ptr<Optimizer> rest;
  if (!o.rest.is_null()) {
    if (!others.empty()) rest = make_optimizer(o.rest, std::move(others), args.key_path("rest"));
  } else {
    MINIDL_CHECK(others.empty(), args.key_path("rest"), ": required: Muon updates only 4-D filters, and '",
                 others.front().name, "' (", shape_str(others.front().tensor.shape()),
                 ") needs another optimizer (e.g. \"rest\": {\"type\": \"SGD\", ...})");
  }
  MINIDL_CHECK(!filters.empty(), path, ": Muon found no 4-D parameter to update");
  return std::make_unique<Muon>(std::move(filters), o, std::move(rest), path);
}

}  // namespace

const OptimizerDescriptor& muon_optimizer() {
  static const OptimizerDescriptor d{
      "Muon", "momentum orthogonalized by Newton-Schulz for the 4-D filters (airbench); \"rest\" takes the others",
      field_infos(MuonOptions::fields()), make_muon};
  return d;
}

}  // namespace minidl
