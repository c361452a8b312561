#include "optim/muon.h"

#include <cmath>
#include <limits>

#include "core/dispatch.h"
#include "core/error.h"
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

MuonOptions MuonOptions::read(JsonArgs& args) {
  MuonOptions o;
  o.lr = args.get_float("lr", o.lr);
  o.momentum = args.get_float("momentum", o.momentum);
  o.nesterov = args.get_bool("nesterov", o.nesterov);
  o.ns.steps = static_cast<int>(args.get_int("ns_steps", o.ns.steps, 0, 100));
  if (args.has("ns_coefficients")) {
    const nlohmann::json& c = args.get_json("ns_coefficients");
    MINIDL_CHECK(c.is_array() && c.size() == 3 && c[0].is_number() && c[1].is_number() && c[2].is_number(),
                 args.key_path("ns_coefficients"), ": expected three numbers [a, b, c], got ", c.dump());
    o.ns.a = c[0].get<float>();
    o.ns.b = c[1].get<float>();
    o.ns.c = c[2].get<float>();
  }
  // Checked as a double, in float32's terms: a larger value would become an infinite float (saved
  // as null, never resumable), one below float32's smallest normal number 0 or subnormal (flushed
  // to 0), and the first step would divide by 0.
  const double ns_eps = args.get_float("ns_eps", o.ns.eps);
  MINIDL_CHECK(std::isfinite(ns_eps) && ns_eps >= std::numeric_limits<float>::min() && ns_eps <= 1,
               args.key_path("ns_eps"), ": expected 0 < ns_eps <= 1 and at least ", std::numeric_limits<float>::min(),
               " (float32's smallest normal number), got ", ns_eps);
  o.ns.eps = static_cast<float>(ns_eps);
  o.normalize_weights = args.get_bool("normalize_weights", o.normalize_weights);
  const std::string ns_dtype = args.get_string("ns_dtype", "float32");
  MINIDL_CHECK(ns_dtype == "float32" || ns_dtype == "bfloat16", args.key_path("ns_dtype"),
               ": expected \"float32\" or \"bfloat16\", got \"", ns_dtype, "\"");
  o.ns.bf16 = ns_dtype == "bfloat16";
  o.weight_decay = args.get_float("weight_decay", o.weight_decay);
  MINIDL_CHECK(std::isfinite(o.weight_decay) && o.weight_decay >= 0, args.key_path("weight_decay"),
               ": expected >= 0, got ", o.weight_decay);
  if (args.has("normalize_interval")) {
    const nlohmann::json& v = args.get_json("normalize_interval");
    const std::string where = args.key_path("normalize_interval");
    const auto whole = [](const nlohmann::json& x) { return x.is_number_integer() && x.get<int64_t>() >= 1; };
    MINIDL_CHECK(whole(v) || (v.is_array() && v.size() == 2 && whole(v[0]) && whole(v[1])), where,
                 ": expected a whole number of steps >= 1, or [start, end] (e.g. [2, 17]), got ", json_excerpt(v));
    o.normalize_interval[0] = v.is_array() ? v[0].get<int64_t>() : v.get<int64_t>();
    o.normalize_interval[1] = v.is_array() ? v[1].get<int64_t>() : v.get<int64_t>();
    MINIDL_CHECK(o.normalize_interval[0] <= kMaxInterval && o.normalize_interval[1] <= kMaxInterval, where,
                 ": expected at most ", kMaxInterval, " steps, got ", json_excerpt(v));
    MINIDL_CHECK(o.normalize_weights || (o.normalize_interval[0] == 1 && o.normalize_interval[1] == 1), where,
                 ": renormalizes the weights, which needs \"normalize_weights\": true");
  }
  const std::string batching = args.get_string("ns_batching", "by_shape");
  MINIDL_CHECK(batching == "by_shape" || batching == "padded", args.key_path("ns_batching"),
               ": expected \"by_shape\" or \"padded\", got \"", batching, "\"");
  o.padded = batching == "padded";
  MINIDL_CHECK(o.lr >= 0, args.key_path("lr"), ": expected >= 0, got ", o.lr);
  MINIDL_CHECK(o.momentum >= 0 && o.momentum < 1, args.key_path("momentum"), ": expected 0 <= momentum < 1, got ",
               o.momentum);
  return o;
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
  args.padded = options_.padded ? 1 : 0;
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
  nlohmann::json j = {{"type", "Muon"},
                      {"lr", options_.lr},
                      {"momentum", options_.momentum},
                      {"nesterov", options_.nesterov},
                      {"ns_steps", options_.ns.steps},
                      {"ns_coefficients", {options_.ns.a, options_.ns.b, options_.ns.c}},
                      {"ns_eps", options_.ns.eps},
                      {"normalize_weights", options_.normalize_weights},
                      {"ns_dtype", options_.ns.bf16 ? "bfloat16" : "float32"}};
  // Written when set: a config without them keeps its resolved form.
  if (options_.weight_decay != 0) j["weight_decay"] = options_.weight_decay;
  const int64_t start = options_.normalize_interval[0], end = options_.normalize_interval[1];
  if (start != 1 || end != 1)
    j["normalize_interval"] = start == end ? nlohmann::json(start) : nlohmann::json({start, end});
  if (options_.padded) j["ns_batching"] = "padded";
  if (rest_) j["rest"] = rest_->to_json();
  return j;
}

std::unique_ptr<Optimizer> make_muon(JsonArgs& args, std::vector<NamedParam> params, const std::string& path) {
  MuonOptions o = MuonOptions::read(args);
  std::vector<NamedParam> filters, others;
  for (NamedParam& p : params) (p.tensor.dim() == 4 ? filters : others).push_back(std::move(p));
  std::unique_ptr<Optimizer> rest;
  if (args.has("rest")) {
    const nlohmann::json& r = args.get_json("rest");
    MINIDL_CHECK(!(r.is_object() && r.value("type", "") == "Muon"), args.key_path("rest"),
                 ": the rest optimizer cannot be Muon");
    if (!others.empty()) rest = make_optimizer(r, std::move(others), args.key_path("rest"));
  } else {
    MINIDL_CHECK(others.empty(), args.key_path("rest"), ": required: Muon updates only 4-D filters, and '",
                 others.front().name, "' (", shape_str(others.front().tensor.shape()),
                 ") needs another optimizer (e.g. \"rest\": {\"type\": \"SGD\", ...})");
  }
  args.finish();
  MINIDL_CHECK(!filters.empty(), path, ": Muon found no 4-D parameter to update");
  return std::make_unique<Muon>(std::move(filters), o, std::move(rest), path);
}

}  // namespace minidl
