#include "optim/muon.h"

#include <algorithm>
#include <cmath>

#include "core/dispatch.h"
#include "core/enum_names.h"
#include "core/error.h"
#include "core/field_kinds.h"
#include "core/json_args.h"

namespace minidl {

namespace {
constexpr const char* kRest = "rest.";
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
  // Checked as a double: a larger value would become an infinite float (saved as null, never resumable).
  const Interval eps_range{0, true, 1, false};
  Field<O> eps = custom_field<O>("ns_eps", "float", d.eps, eps_range.text(), "X0 = G / (||G||_F + ns_eps), as float32");
  eps.read = [d, eps_range](JsonArgs& a, const std::string& key, O& o) {
    const double v = a.get_float(key, d.eps);
    if (!eps_range.contains(v)) fail_range(a, key, "a number", eps_range.text(), str(v));
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

}  // namespace

// Muon's published defaults: lr 0.02, momentum 0.95 with Nesterov, 3 quintic iterations.
const Fields<MuonOptions>& MuonOptions::fields() {
  using O = MuonOptions;
  static const Fields<O> f{[] {
    std::vector<Field<O>> rows = {
        number("lr", &O::lr, 0.02, kAtLeastZero, "the learning rate; the schedule's factor multiplies it"),
        number("momentum", &O::momentum, 0.95, {0, false, 1, true}, "momentum factor"),
        flag("nesterov", &O::nesterov, true, "Nesterov momentum")};
    for (Field<O>& r : newton_schulz_fields()) rows.push_back(r);
    rows.push_back(flag("normalize_weights", &O::normalize_weights, false,
                        "rescale each filter to Frobenius norm sqrt(rows) before the step"));
    Field<O> rest = custom_field<O>("rest", "object", nullptr, "\"SGD\" or \"AdamW\"",
                                    "the optimizer (its config object) of the parameters that are not 4-D filters; "
                                    "required when there are any");
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
  }()};
  return f;
}

Muon::Muon(std::vector<NamedParam> filters, MuonOptions options, std::unique_ptr<Optimizer> rest,
           const std::string& path)
    : GroupedOptimizer("Muon", std::move(filters), {}, 0.0, {"momentum_buffer"}, 1, path),
      options_(options),
      rest_(std::move(rest)) {
  for (const NamedParam& p : params_)
    MINIDL_CHECK(p.tensor.dim() == 4 && p.tensor.numel() > 0, path, ": Muon updates non-empty 4-D filters, '",
                 p.name, "' is ", shape_str(p.tensor.shape()));
}

// The lr goes through the scalar table, so a replayed CUDA graph reads each step's value.
void Muon::prepare(double lr) {
  if (rest_) rest_->prepare(options_.lr > 0 ? lr * rest_->base_lr() / options_.lr : 0.0);
  for (size_t i = 0; i < params_.size(); ++i) {
    scalar_row(i)[0] = static_cast<float>(lr);
    count_step(i);
  }
  upload_scalars();
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
                     p.numel() / rows, scalar_table() + i});
  }
  kernels::MuonStepArgs args;
  args.momentum = static_cast<float>(options_.momentum);
  args.nesterov = options_.nesterov ? 1 : 0;
  args.normalize = options_.normalize_weights ? 1 : 0;
  args.ns = options_.ns;
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
  return (options_.nesterov ? 4 : 2) + 2 + (options_.normalize_weights ? 3 : 0);
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
