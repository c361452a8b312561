// batch_norm, group_norm and layer_norm: argument checks (errors name the op, the tensor and the
// shape it should have), the forward on x's device, and one autograd node whose backward
// computes dx, dweight and dbias together from x and the saved per-group mean and rstd.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/dispatch.h"
#include "core/error.h"
#include "core/settings.h"
#include "core/storage_rounding.h"
#include "layers/norm/norm.h"
#include "layers/norm/norm_kernels.h"

namespace minidl {

namespace {

using norm::NormLayout;

void check_input(const Tensor& x, const char* op) {
  MINIDL_CHECK(x.defined(), op, ": input is undefined");
  MINIDL_CHECK(is_floating(x.dtype()), op, ": expects a float32, bfloat16 or float16 input, got ", x.str());
  MINIDL_CHECK(x.numel() > 0, op, ": input ", shape_str(x.shape()), " is empty");
}

// weight/bias/running statistics: undefined, or float32 of `shape` on x's device.
void check_param(const Tensor& t, const Tensor& x, const Shape& shape, const char* op, const char* name) {
  if (!t.defined()) return;
  MINIDL_CHECK(t.dtype() == DType::Float32 && t.shape() == shape, op, ": ", name, " must be float32 of shape ",
               shape_str(shape), ", got ", t.str());
  check_same_device(x, t, str(op, " input and ", name));
}

const float* ptr(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }
float* mut_ptr(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }
Tensor detached(const Tensor& t) { return t.defined() ? t.detach() : Tensor(); }

struct Options {
  bool training = true;
  double momentum = 0.1;
  double eps = 1e-5;
  norm::NormActivation activation = norm::NormActivation::None;
  std::shared_ptr<const NormGroup> group;  // synchronized statistics (training BatchNorm), or null
  bool single_read = true;
};

// A synchronized pass's exchange buffers on x's device: this rank's sums of `groups` groups and
// every rank's, float64 values carried in float32 tensors (the collective copies bytes).
struct SyncBuffers {
  Tensor local, gathered;
  norm::NormSync sync;

  SyncBuffers(const std::shared_ptr<const NormGroup>& group, int64_t groups, Device dev) {
    const int64_t floats = groups * norm::kSyncValues * 2;
    local = Tensor::empty({floats}, DType::Float32, dev);
    gathered = Tensor::empty({group->world_size * floats}, DType::Float32, dev);
    sync.world_size = group->world_size;
    sync.local = static_cast<double*>(local.raw_data());
    sync.gathered = static_cast<double*>(gathered.raw_data());
    sync.exchange = [group, in = local, out = gathered]() mutable { group->all_gather(in, out); };
  }
};

// The GPU path the passes take: chosen by size among the single-read kernels and the three-launch
// ones, or the three-launch kernels only (norm_path.h says why).
norm::NormPath path_of(const Options& o) { return o.single_read ? norm::NormPath::Auto : norm::NormPath::ThreeLaunch; }

// Runs the forward and, when any of x, weight, bias needs a gradient, records the node. `out`:
// y's dtype, x's own, or a half type for a float32 x (layer_norm_to): the Warp path then writes
// y in it and its backward takes dy in it; where that path does not run, the float32 op and a
// cast, which give the same bits.
Tensor normalize(const char* op, const NormLayout& layout, const Tensor& x, const Tensor& weight, const Tensor& bias,
                 const Tensor& running_mean, const Tensor& running_var, const Options& o, DType out) {
  const bool to_half = out != x.dtype();
  MINIDL_ASSERT(!to_half || (x.dtype() == DType::Float32 && is_half(out)));
  if (to_half && !x.is_cuda())
    return normalize(op, layout, x, weight, bias, running_mean, running_var, o, x.dtype()).to(out);
  // A half input: float32 statistics and parameters, half output (autocast's rule). The GPU
  // kernels read and write the half type; the CPU runs storage-rounded.
  if (holds_half(x) && !x.is_cuda())
    return normalize(op, layout, as_float32(x), weight, bias, running_mean, running_var, o, DType::Float32)
        .to(x.dtype());
  const bool half = holds_half(x);
  const Device dev = x.device();
  Tensor y = Tensor::empty(x.shape(), out, dev, x.memory_format());
  Tensor mean = Tensor::empty({layout.groups()}, DType::Float32, dev);
  Tensor rstd = Tensor::empty({layout.groups()}, DType::Float32, dev);
  norm::NormForward a;
  a.x = half ? nullptr : x.data<float>();
  a.weight = ptr(weight);
  a.bias = ptr(bias);
  a.y = half || to_half ? nullptr : y.data<float>();
  a.mean = mean.data<float>();
  a.rstd = rstd.data<float>();
  a.running_mean = mut_ptr(running_mean);
  a.running_var = mut_ptr(running_var);
  a.training = o.training;
  a.momentum = o.momentum;
  a.eps = o.eps;
  a.activation = o.activation;
  a.path = path_of(o);
  std::optional<SyncBuffers> sync;
  if (o.group) {
    sync.emplace(o.group, layout.groups(), dev);
    a.sync = &sync->sync;
  }
  bool ran = true;
  dispatch(
      dev, "forward", [&] { norm::forward_cpu(layout, a); },
      [&] {
        if (!to_half && !half) return (void)norm::forward_cuda(layout, a);
        dispatch_dtype(out, "normalization", [&](auto tag) {
          using T = decltype(tag);
          if constexpr (!std::is_same_v<T, float>) {
            if (to_half)
              ran = norm::forward_float_half_cuda(layout, a, y.data<T>());
            else
              norm::forward_half_cuda(layout, a, x.data<T>(), y.data<T>());
          }
        });
      });
  if (!ran) return normalize(op, layout, x, weight, bias, running_mean, running_var, o, x.dtype()).to(out);

  std::vector<Tensor> inputs{x};
  if (weight.defined()) inputs.push_back(weight);
  if (bias.defined()) inputs.push_back(bias);
  if (!autograd::needs_grad(inputs)) return y;
  autograd::record(
      y, op, std::move(inputs),
      [layout, o, out, xs = x.detach(), ws = detached(weight), bs = detached(bias), mean, rstd](
          const Tensor& dy_in) -> std::vector<Tensor> {
        const bool to_half = out != xs.dtype();
        Tensor dy = dy_in.to(out, xs.memory_format());
        // The float32 pass reads a widened copy, always 16-byte aligned: a misaligned half view
        // would send the mixed pass down the strided pattern and change the sums' grouping.
        if (to_half && reinterpret_cast<uintptr_t>(dy.raw_data()) % 16 != 0) dy = dy.clone();
        const bool half = holds_half(xs);
        MINIDL_ASSERT(dy.shape() == xs.shape() && dy.device() == xs.device());
        Tensor dx = Tensor::empty_like(xs);
        Tensor dw = ws.defined() ? Tensor::empty_like(ws) : Tensor();
        Tensor db = bs.defined() ? Tensor::empty_like(bs) : Tensor();
        norm::NormBackward b;
        b.x = half ? nullptr : xs.data<float>();
        b.dy = half || to_half ? nullptr : dy.data<float>();
        b.weight = ptr(ws);
        b.bias = ptr(bs);
        b.mean = mean.data<float>();
        b.rstd = rstd.data<float>();
        b.training = o.training;
        b.activation = o.activation;
        b.dx = half ? nullptr : dx.data<float>();
        b.dweight = mut_ptr(dw);
        b.dbias = mut_ptr(db);
        b.path = path_of(o);
        std::optional<SyncBuffers> sync;
        if (o.group) {
          sync.emplace(o.group, layout.groups(), dy.device());
          b.sync = &sync->sync;
        }
        dispatch(
            dy.device(), "backward", [&] { norm::backward_cpu(layout, b); },
            [&] {
              if (!to_half && !half) return (void)norm::backward_cuda(layout, b);
              bool ran = true;
              dispatch_dtype(out, "normalization", [&](auto tag) {
                using T = decltype(tag);
                if constexpr (!std::is_same_v<T, float>) {
                  if (to_half)
                    ran = norm::backward_float_half_cuda(layout, b, dy.data<T>());
                  else
                    norm::backward_half_cuda(layout, b, xs.data<T>(), dy.data<T>(), dx.data<T>());
                }
              });
              if (!ran) {
                // Widening is exact: the float32 pass sees the same dy.
                dy = dy.to(DType::Float32);
                b.dy = dy.data<float>();
                norm::backward_cuda(layout, b);
              }
            });
        std::vector<Tensor> grads{dx};
        if (dw.defined()) grads.push_back(dw);
        if (db.defined()) grads.push_back(db);
        return grads;
      });
  return y;
}

Tensor batch_norm_with(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                       const Tensor& bias, const Options& o) {
  check_input(x, "batch_norm");
  MINIDL_CHECK(x.dim() == 4 || x.dim() == 5, "batch_norm: expected input (N, C, H, W) or (N, C, D, H, W), got ",
               shape_str(x.shape()));
  const int64_t n = x.size(0), c = x.size(1), hw = x.numel() / std::max<int64_t>(n * c, 1);
  check_param(running_mean, x, {c}, "batch_norm", "running_mean");
  check_param(running_var, x, {c}, "batch_norm", "running_var");
  check_param(weight, x, {c}, "batch_norm", "weight");
  check_param(bias, x, {c}, "batch_norm", "bias");
  MINIDL_CHECK(running_mean.defined() == running_var.defined(),
               "batch_norm: running_mean and running_var must both be given or both be undefined");
  MINIDL_CHECK(o.training || running_mean.defined(), "batch_norm: eval mode needs running_mean and running_var");
  MINIDL_CHECK(!o.training || n * hw > 1,
               "batch_norm: expected more than 1 value per channel when training, got input ", shape_str(x.shape()));
  MINIDL_CHECK(o.eps >= 0, "batch_norm: eps must be >= 0, got ", o.eps);
  // Channels-last x is [N*H*W][C] (a volume's [N*D*H*W][C]): each channel is a column, the layout
  // of BatchNorm1d, which the same kernels run (a plane of 1), reading and writing x in place of
  // any transpose.
  const NormLayout layout = is_channels_last_format(x.memory_format()) ? NormLayout::batch_norm(n * hw, c, 1) : NormLayout::batch_norm(n, c, hw);
  return normalize("batch_norm", layout, x, weight, bias, running_mean, running_var, o, x.dtype());
}

}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps, norm::NormActivation activation,
                  bool single_read) {
  return batch_norm_with(x, running_mean, running_var, weight, bias,
                         {training, momentum, eps, activation, nullptr, single_read});
}

Tensor sync_batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                       const Tensor& bias, std::shared_ptr<const NormGroup> group, double momentum, double eps,
                       norm::NormActivation activation, bool single_read) {
  MINIDL_CHECK(group && group->world_size >= 1 && group->all_gather, "sync_batch_norm: no group of ranks given");
  if (group->world_size == 1)
    return batch_norm(x, running_mean, running_var, weight, bias, true, momentum, eps, activation, single_read);
  return batch_norm_with(x, running_mean, running_var, weight, bias,
                         {true, momentum, eps, activation, std::move(group), single_read});
}

Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight, const Tensor& bias, double eps,
                  norm::NormActivation activation, bool single_read) {
  // Under autocast GroupNorm is a float32 op: a half input is widened and the output stays float32.
  if (holds_half(x) && autocast_active())
    return group_norm(as_float32(x), num_groups, weight, bias, eps, activation, single_read);
  check_input(x, "group_norm");
  MINIDL_CHECK(x.dim() >= 2, "group_norm: expected input (N, C, *), got ", shape_str(x.shape()));
  const int64_t n = x.size(0), c = x.size(1), hw = x.numel() / (n * c);
  MINIDL_CHECK(num_groups >= 1 && c % num_groups == 0, "group_norm: the ", c, " channels of input ",
               shape_str(x.shape()), " cannot be split into ", num_groups, " groups");
  check_param(weight, x, {c}, "group_norm", "weight");
  check_param(bias, x, {c}, "group_norm", "bias");
  MINIDL_CHECK(eps >= 0, "group_norm: eps must be >= 0, got ", eps);
  Options o;
  o.eps = eps;
  o.activation = activation;
  o.single_read = single_read;
  // Channels-last x is [N][H*W][C] (a volume's [N][D*H*W][C]): a group is C/G channels at every
  // position of its sample, the ChannelGroup layout, which the kernels (and the CPU reference) read
  // in place of a transpose.
  const NormLayout layout = is_channels_last_format(x.memory_format()) ? NormLayout::group_norm_channels_last(n, c, hw, num_groups)
                                                 : NormLayout::group_norm(n, c, hw, num_groups);
  return normalize("group_norm", layout, x, weight, bias, Tensor(), Tensor(), o, x.dtype());
}

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias, double eps,
                  norm::NormActivation activation, bool single_read) {
  // Under autocast LayerNorm is a float32 op, as GroupNorm.
  if (holds_half(x) && autocast_active())
    return layer_norm(as_float32(x), normalized_shape, weight, bias, eps, activation, single_read);
  MINIDL_CHECK(x.defined(), "layer_norm: input is undefined");
  return layer_norm_to(x, x.dtype(), normalized_shape, weight, bias, eps, activation, single_read);
}

Tensor layer_norm_to(const Tensor& x, DType out, const Shape& normalized_shape, const Tensor& weight,
                     const Tensor& bias, double eps, norm::NormActivation activation, bool single_read) {
  check_input(x, "layer_norm");
  MINIDL_CHECK(out == x.dtype() || (x.dtype() == DType::Float32 && is_half(out)), "layer_norm: a ",
               dtype_name(x.dtype()), " input cannot give a ", dtype_name(out), " output (float32 may give a half one)");
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  const Shape trailing(x.shape().end() - std::min(k, x.dim()), x.shape().end());
  MINIDL_CHECK(k >= 1 && x.dim() >= k && trailing == normalized_shape, "layer_norm: input ", shape_str(x.shape()),
               " does not end with normalized_shape ", shape_str(normalized_shape));
  check_param(weight, x, normalized_shape, "layer_norm", "weight");
  check_param(bias, x, normalized_shape, "layer_norm", "bias");
  MINIDL_CHECK(eps >= 0, "layer_norm: eps must be >= 0, got ", eps);
  const int64_t d = shape_numel(normalized_shape);
  Options o;
  o.eps = eps;
  o.activation = activation;
  o.single_read = single_read;
  const NormLayout layout = NormLayout::layer_norm(x.numel() / d, d);
  if (x.is_channels_last()) {
    // Over (C, H, W) a sample is one group whatever the order of its elements, so the kernels run
    // on the channels-last memory as it is, with weight and bias reordered to (H, W, C) to match
    // (their gradients come back through the same reorder). Over fewer dims a group is strided
    // there: normalized in NCHW order.
    if (k != 3)
      return layer_norm_to(x.contiguous(), out, normalized_shape, weight, bias, eps, activation, single_read)
          .to(MemoryFormat::ChannelsLast);
    const Shape param{1, x.size(1), x.size(2), x.size(3)};
    auto reordered = [&](const Tensor& p) { return p.defined() ? p.reshape(param).to(MemoryFormat::ChannelsLast) : p; };
    return normalize("layer_norm", layout, x, reordered(weight), reordered(bias), Tensor(), Tensor(), o, out);
  }
  return normalize("layer_norm", layout, x, weight, bias, Tensor(), Tensor(), o, out);
}

Tensor layer_norm_2d(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                     norm::NormActivation activation, bool single_read) {
  check_input(x, "layer_norm_2d");
  MINIDL_CHECK(x.dim() == 4, "layer_norm_2d: expected input (N, C, H, W), got ", shape_str(x.shape()));
  const int64_t c = x.size(1);
  check_param(weight, x, {c}, "layer_norm_2d", "weight");
  check_param(bias, x, {c}, "layer_norm_2d", "bias");
  MINIDL_CHECK(eps >= 0, "layer_norm_2d: eps must be >= 0, got ", eps);
  if (!x.is_channels_last())
    return layer_norm_2d(x.to(MemoryFormat::ChannelsLast), weight, bias, eps, activation, single_read).contiguous();
  Options o;
  o.eps = eps;
  o.activation = activation;
  o.single_read = single_read;
  return normalize("layer_norm_2d", NormLayout::layer_norm(x.numel() / c, c), x, weight, bias, Tensor(), Tensor(), o,
                   x.dtype());
}

}  // namespace minidl
