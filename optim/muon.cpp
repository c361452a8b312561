#include "optim/muon.h"

#include <cmath>
#include <limits>

#include "core/dispatch.h"
#include "core/error.h"
#include "core/json_args.h"

namespace minidl {

namespace {
constexpr const char* kRest = "rest.";
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
  MINIDL_CHECK(o.lr >= 0, args.key_path("lr"), ": expected >= 0, got ", o.lr);
  MINIDL_CHECK(o.momentum >= 0 && o.momentum < 1, args.key_path("momentum"), ": expected 0 <= momentum < 1, got ",
               o.momentum);
  return o;
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
  nlohmann::json j = {{"type", "Muon"},
                      {"lr", options_.lr},
                      {"momentum", options_.momentum},
                      {"nesterov", options_.nesterov},
                      {"ns_steps", options_.ns.steps},
                      {"ns_coefficients", {options_.ns.a, options_.ns.b, options_.ns.c}},
                      {"ns_eps", options_.ns.eps},
                      {"normalize_weights", options_.normalize_weights},
                      {"ns_dtype", options_.ns.bf16 ? "bfloat16" : "float32"}};
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
