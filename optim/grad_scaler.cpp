#include "optim/grad_scaler.h"

#include <cmath>

#include "core/allocator.h"
#include "core/device.h"
#include "core/dispatch.h"
#include "core/error.h"
#include "core/json_args.h"
#include "optim/grad_scaler_kernels.h"

namespace minidl {

namespace kernels {

void unscale_cpu(float* g, float inv_scale, int32_t* found_inf, int64_t n) {
  for (int64_t i = 0; i < n; ++i) unscale_update(g, inv_scale, found_inf, i);
}

}  // namespace kernels

GradScalerOptions GradScalerOptions::from_json(const nlohmann::json& j, const std::string& path) {
  MINIDL_CHECK(j.is_object(), path, ": expected an object, got ", j.dump());
  JsonArgs args(j, path);
  GradScalerOptions o;
  o.init_scale = args.get_float("init_scale", o.init_scale);
  o.growth_factor = args.get_float("growth_factor", o.growth_factor);
  o.backoff_factor = args.get_float("backoff_factor", o.backoff_factor);
  o.growth_interval = args.get_int("growth_interval", o.growth_interval);
  args.finish();
  MINIDL_CHECK(std::isfinite(static_cast<float>(o.init_scale)) && o.init_scale > 0, args.key_path("init_scale"),
               ": expected a positive float32 value, got ", o.init_scale);
  MINIDL_CHECK(o.growth_factor > 1 && std::isfinite(o.growth_factor), args.key_path("growth_factor"),
               ": expected > 1, got ", o.growth_factor);
  MINIDL_CHECK(o.backoff_factor > 0 && o.backoff_factor < 1, args.key_path("backoff_factor"),
               ": expected between 0 and 1, got ", o.backoff_factor);
  MINIDL_CHECK(o.growth_interval >= 1, args.key_path("growth_interval"), ": expected >= 1, got ", o.growth_interval);
  return o;
}

nlohmann::json GradScalerOptions::to_json() const {
  return {{"init_scale", init_scale},
          {"growth_factor", growth_factor},
          {"backoff_factor", backoff_factor},
          {"growth_interval", growth_interval}};
}

GradScaler::GradScaler(GradScalerOptions options, Device device)
    : options_(options),
      device_(device),
      scale_(static_cast<float>(options.init_scale)),
      found_inf_(Tensor::zeros({1}, DType::Int32, device)),
      found_host_(allocate_pinned(sizeof(int32_t))) {}

Tensor GradScaler::backward_seed() const { return Tensor::full({1}, scale_, device_); }

bool GradScaler::unscale(const std::vector<Tensor>& grads) {
  const float inv_scale = static_cast<float>(1.0 / static_cast<double>(scale_));
  found_inf_.zero_();
  int32_t* flag = found_inf_.data<int32_t>();
  for (const Tensor& g : grads) {
    MINIDL_CHECK(g.defined() && g.dtype() == DType::Float32 && g.device() == device_,
                 "grad_scaler: expected float32 gradients on ", device_.str(), ", got ", g.str());
    dispatch(
        device_, "unscale", [&] { kernels::unscale_cpu(g.data<float>(), inv_scale, flag, g.numel()); },
        [&] { kernels::unscale_cuda(g.data<float>(), inv_scale, flag, g.numel()); });
  }
  int32_t* host = static_cast<int32_t*>(found_host_.get());
  copy_bytes_async(host, Device::cpu(), flag, device_, sizeof(int32_t));
  synchronize(device_);
  return *host != 0;
}

void GradScaler::update(bool found_inf) {
  if (found_inf) {
    scale_ = static_cast<float>(scale_ * options_.backoff_factor);
    growth_tracker_ = 0;
    ++skipped_steps_;
    return;
  }
  if (++growth_tracker_ < options_.growth_interval) return;
  const float grown = static_cast<float>(scale_ * options_.growth_factor);
  if (std::isfinite(grown)) scale_ = grown;
  growth_tracker_ = 0;
}

nlohmann::json GradScaler::state() const {
  return {{"scale", scale_}, {"growth_tracker", growth_tracker_}, {"skipped_steps", skipped_steps_}};
}

void GradScaler::load_state(const nlohmann::json& s) {
  MINIDL_CHECK(s.is_object() && s.size() == 3 && s.contains("scale") && s["scale"].is_number() &&
                   s.contains("growth_tracker") && s["growth_tracker"].is_number_integer() &&
                   s.contains("skipped_steps") && s["skipped_steps"].is_number_integer(),
               "grad_scaler state: expected {\"scale\", \"growth_tracker\", \"skipped_steps\"}, got ", s.dump());
  const float scale = s["scale"].get<float>();
  const int64_t tracker = s["growth_tracker"].get<int64_t>(), skipped = s["skipped_steps"].get<int64_t>();
  MINIDL_CHECK(std::isfinite(scale) && scale > 0, "grad_scaler state: scale must be finite and positive, got ",
               s["scale"].dump());
  MINIDL_CHECK(tracker >= 0 && tracker < options_.growth_interval && skipped >= 0,
               "grad_scaler state: growth_tracker must be in 0..", options_.growth_interval - 1,
               " and skipped_steps >= 0, got ", s.dump());
  scale_ = scale;
  growth_tracker_ = tracker;
  skipped_steps_ = skipped;
}

}  // namespace minidl
