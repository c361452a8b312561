#include "optim/grad_scaler.h"

#include <cfloat>
#include <cmath>

#include "core/device.h"
#include "core/dispatch.h"
#include "core/error.h"
#include "core/field_kinds.h"
#include "core/json_args.h"
#include "optim/grad_scaler_kernels.h"

namespace minidl {

namespace kernels {

void unscale_cpu(const std::vector<UnscaleTensor>& grads, const float* scale, float* found_inf) {
  const float inv_scale = inverse_scale(*scale);
  for (const UnscaleTensor& t : grads)
    for (int64_t i = 0; i < t.n; ++i) unscale_update(t.grad, inv_scale, found_inf, i);
}

}  // namespace kernels

const Fields<GradScalerOptions>& GradScalerOptions::fields() {
  using O = GradScalerOptions;
  static const Fields<O> f{
      {number("init_scale", &O::init_scale, 65536.0, {}, "the first loss scale", "a normal positive float32 value"),
       number("growth_factor", &O::growth_factor, 2.0, {1, true, kUnbounded, false},
              "the scale's factor after growth_interval steps without an inf or NaN"),
       number("backoff_factor", &O::backoff_factor, 0.5, {0, true, 1, true}, "the scale's factor after an inf or NaN"),
       integer("growth_interval", &O::growth_interval, 2000, {1, INT32_MAX},
               "steps without an inf or NaN before the scale grows")},
      [](const O& o, const JsonArgs& args) {
        MINIDL_CHECK(kernels::usable_scale(static_cast<float>(o.init_scale)), args.key_path("init_scale"),
                     ": expected a normal positive float32 value (", FLT_MIN, " to ", FLT_MAX, "), got ", o.init_scale);
      }};
  return f;
}

GradScalerOptions GradScalerOptions::from_json(const nlohmann::json& j, const std::string& path) {
  if (j.is_null()) return {};
  MINIDL_CHECK(j.is_object(), path, ": expected an object, got ", j.dump());
  JsonArgs args(j, path);
  return read_struct(fields(), args);
}

GradScaler::GradScaler(GradScalerOptions options, Device device)
    : options_(options),
      device_(device),
      scale_(Tensor::full({1}, static_cast<float>(options.init_scale), device)),
      found_inf_(Tensor::zeros({1}, DType::Float32, device)),
      counts_(Tensor::zeros({2}, DType::Int32, device)) {}

Tensor GradScaler::backward_seed() const { return scale_.clone(); }

void GradScaler::unscale(const std::vector<Tensor>& grads) {
  std::vector<kernels::UnscaleTensor> list;
  for (const Tensor& g : grads) {
    MINIDL_CHECK(g.defined() && g.dtype() == DType::Float32 && g.device() == device_,
                 "grad_scaler: expected float32 gradients on ", device_.str(), ", got ", g.str());
    list.push_back({g.data<float>(), g.numel()});
  }
  found_inf_.fill_(0.f);  // a kernel on the stream: no wait for the backward
  const float* scale = scale_.data<float>();
  float* flag = found_inf_.data<float>();
  dispatch(
      device_, "unscale", [&] { kernels::unscale_cpu(list, scale, flag); },
      [&] { kernels::unscale_cuda(list, scale, flag); });
}

void GradScaler::update() {
  const kernels::ScalerState state{scale_.data<float>(), found_inf_.data<float>(), counts_.data<int32_t>()};
  const kernels::ScalerRule rule{options_.growth_factor, options_.backoff_factor,
                                 static_cast<int32_t>(options_.growth_interval)};
  dispatch(
      device_, "update_scale", [&] { kernels::update_scale(state, rule); },
      [&] { kernels::update_scale_cuda(state, rule); });
}

bool GradScaler::found_inf() const { return found_inf_.to_vector()[0] != 0.f; }
float GradScaler::scale() const { return scale_.to_vector()[0]; }
int64_t GradScaler::growth_tracker() const { return counts_.values<int32_t>()[0]; }
int64_t GradScaler::skipped_steps() const { return counts_.values<int32_t>()[1]; }

nlohmann::json GradScaler::state() const {
  const std::vector<int32_t> counts = counts_.values<int32_t>();
  return {{"scale", scale()}, {"growth_tracker", counts[0]}, {"skipped_steps", counts[1]}};
}

void GradScaler::load_state(const nlohmann::json& s) {
  MINIDL_CHECK(s.is_object() && s.size() == 3 && s.contains("scale") && s["scale"].is_number() &&
                   s.contains("growth_tracker") && s["growth_tracker"].is_number_integer() &&
                   s.contains("skipped_steps") && s["skipped_steps"].is_number_integer(),
               "grad_scaler state: expected {\"scale\", \"growth_tracker\", \"skipped_steps\"}, got ", s.dump());
  const float scale = s["scale"].get<float>();
  const int64_t tracker = s["growth_tracker"].get<int64_t>(), skipped = s["skipped_steps"].get<int64_t>();
  MINIDL_CHECK(kernels::usable_scale(scale), "grad_scaler state: scale must be a normal positive float32 value, got ",
               s["scale"].dump());
  MINIDL_CHECK(tracker >= 0 && tracker < options_.growth_interval && skipped >= 0 && skipped <= INT32_MAX,
               "grad_scaler state: growth_tracker must be in 0..", options_.growth_interval - 1,
               " and skipped_steps in 0..", INT32_MAX, ", got ", s.dump());
  scale_.copy_(Tensor::full({1}, scale, Device::cpu()));
  counts_.copy_(Tensor::from_vector(std::vector<int32_t>{static_cast<int32_t>(tracker), static_cast<int32_t>(skipped)},
                                    {2}, Device::cpu()));
}

}  // namespace minidl
