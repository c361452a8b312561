#include "optim/grad_scaler.h"

#include <cfloat>
#include <cmath>

#include "core/allocator.h"
#include "core/device.h"
#include "core/dispatch.h"
#include "core/error.h"
#include "core/json_args.h"
#include "optim/grad_scaler_kernels.h"

namespace minidl {

namespace {

// A scale whose reciprocal is finite and nonzero: normal, positive, finite (a subnormal or zero
// scale would make 1/scale infinite and the unscaled gradients inf or NaN unflagged).
bool usable_scale(float s) { return std::isfinite(s) && s >= FLT_MIN; }

}  // namespace

namespace kernels {

void unscale_cpu(float* g, float inv_scale, float* found_inf, int64_t n) {
  for (int64_t i = 0; i < n; ++i) unscale_update(g, inv_scale, found_inf, i);
}

}  // namespace kernels

GradScalerOptions GradScalerOptions::from_json(const nlohmann::json& j, const std::string& path) {
  if (j.is_null()) return {};
  MINIDL_CHECK(j.is_object(), path, ": expected an object, got ", j.dump());
  JsonArgs args(j, path);
  GradScalerOptions o;
  o.init_scale = args.get_float("init_scale", o.init_scale);
  o.growth_factor = args.get_float("growth_factor", o.growth_factor);
  o.backoff_factor = args.get_float("backoff_factor", o.backoff_factor);
  o.growth_interval = args.get_int("growth_interval", o.growth_interval);
  args.finish();
  MINIDL_CHECK(usable_scale(static_cast<float>(o.init_scale)), args.key_path("init_scale"),
               ": expected a normal positive float32 value (", FLT_MIN, " to ", FLT_MAX, "), got ", o.init_scale);
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
      found_inf_(Tensor::zeros({1}, DType::Float32, device)),
      found_host_(allocate_pinned(sizeof(float))) {}

Tensor GradScaler::backward_seed() const { return Tensor::full({1}, scale_, device_); }

bool GradScaler::unscale(const std::vector<Tensor>& grads) {
  const float inv_scale = static_cast<float>(1.0 / static_cast<double>(scale_));
  found_inf_.fill_(0.f);  // a kernel on the stream: no wait for the backward
  float* flag = found_inf_.data<float>();
  for (const Tensor& g : grads) {
    MINIDL_CHECK(g.defined() && g.dtype() == DType::Float32 && g.device() == device_,
                 "grad_scaler: expected float32 gradients on ", device_.str(), ", got ", g.str());
    dispatch(
        device_, "unscale", [&] { kernels::unscale_cpu(g.data<float>(), inv_scale, flag, g.numel()); },
        [&] { kernels::unscale_cuda(g.data<float>(), inv_scale, flag, g.numel()); });
  }
  float* host = static_cast<float*>(found_host_.get());
  copy_bytes_async(host, Device::cpu(), flag, device_, sizeof(float));
  synchronize(device_);
  return *host != 0.f;
}

void GradScaler::update(bool found_inf) {
  if (found_inf) {
    // Backing off stops at the smallest normal float (1/scale stays finite); PyTorch would go on
    // into subnormals and zero, where the unscaled gradients become inf or NaN.
    const float backed_off = static_cast<float>(scale_ * options_.backoff_factor);
    if (usable_scale(backed_off)) scale_ = backed_off;
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
  MINIDL_CHECK(usable_scale(scale), "grad_scaler state: scale must be a normal positive float32 value, got ",
               s["scale"].dump());
  MINIDL_CHECK(tracker >= 0 && tracker < options_.growth_interval && skipped >= 0,
               "grad_scaler state: growth_tracker must be in 0..", options_.growth_interval - 1,
               " and skipped_steps >= 0, got ", s.dump());
  scale_ = scale;
  growth_tracker_ = tracker;
  skipped_steps_ = skipped;
}

}  // namespace minidl
