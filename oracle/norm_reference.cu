// The float64 oracle of the normalization layers on the GPU: the textbook formulas, one block per
// group (and, for the weight/bias gradients, one block per feature), two passes for the
// statistics (the mean, then the mean square of x - mean), every sum in float64 and in a fixed
// order. It is slow on purpose: nothing here is clever, so the tests and the benchmark can hold
// the fast kernels (norm_forward.cu, norm_backward.cu) against it on shapes too large for the CPU.
#include "core/allocator.h"
#include "core/cuda/kernel_helpers.cuh"
#include "core/cuda/runtime.h"
#include "core/error.h"
#include "oracle/norm_reference.h"
#include "layers/norm/norm_math.h"

namespace minidl::norm {

namespace {

constexpr int kBlock = 256;

// The layout with everything a kernel needs precomputed (NormLayout's methods are host-only).
struct Layout {
  NormKind kind;
  int64_t rows, width, plane, segment, groups, group_size, features;
};

Layout device_layout(const NormLayout& l) {
  return {l.kind, l.rows, l.width(), l.plane, l.segment, l.groups(), l.group_size(), l.features};
}

// Flat index of the k-th element of group g, in memory order. ChannelGroup: a group of sample
// g / G is `segment` channels at each of its positions.
__device__ int64_t element_of_group(const Layout& l, int64_t g, int64_t k) {
  if (l.kind == NormKind::Segment) return g * l.segment + k;
  if (l.kind == NormKind::ChannelGroup) {
    const int64_t groups_per_row = l.features / l.segment;
    return g / groups_per_row * l.width + k / l.segment * l.features + g % groups_per_row * l.segment + k % l.segment;
  }
  return k / l.plane * l.width + g * l.plane + k % l.plane;
}

// Flat index of the k-th element of feature f (k < rows * plane), in memory order.
__device__ int64_t element_of_feature(const Layout& l, int64_t f, int64_t k) {
  if (l.kind == NormKind::ChannelGroup) return k * l.features + f;
  return k / l.plane * l.width + f * l.plane + k % l.plane;
}

__device__ int64_t feature_of(const Layout& l, int64_t i) {
  return l.kind == NormKind::ChannelGroup ? i % l.features : i % l.width / l.plane;
}
__device__ int64_t group_of(const Layout& l, int64_t i) {
  if (l.kind == NormKind::ChannelGroup) return i / l.width * (l.features / l.segment) + i % l.features / l.segment;
  return l.kind == NormKind::Channel ? feature_of(l, i) : i / l.segment;
}

// The fused activation in float64 and its derivative (ReLU has no rounding to check: float32).
__device__ double activation_ref(NormActivation a, double x) {
  switch (a) {
    case NormActivation::GELU:
      return 0.5 * x * (1.0 + erf(x * 0.70710678118654752440));
    case NormActivation::SiLU:
      return x / (1.0 + exp(-x));
    case NormActivation::Hardswish:
      return x * fmin(fmax(x + 3.0, 0.0), 6.0) / 6.0;
    case NormActivation::Sigmoid:
      return 1.0 / (1.0 + exp(-x));
    default:
      return act::forward(a, static_cast<float>(x));
  }
}
__device__ double activation_grad_ref(NormActivation a, double x) {
  switch (a) {
    case NormActivation::GELU:
      return 0.5 * (1.0 + erf(x * 0.70710678118654752440)) + x * 0.39894228040143267794 * exp(-0.5 * x * x);
    case NormActivation::SiLU: {
      const double s = 1.0 / (1.0 + exp(-x));
      return s * (1.0 + x * (1.0 - s));
    }
    case NormActivation::Hardswish:
      return x < -3.0 ? 0.0 : x <= 3.0 ? x / 3.0 + 0.5 : 1.0;
    case NormActivation::Sigmoid: {
      const double s = 1.0 / (1.0 + exp(-x));
      return s * (1.0 - s);
    }
    default:
      return 1.0;
  }
}

// y of element i (feature f) from float64 statistics, before the activation.
__device__ double normalized_ref(const Layout& l, const float* x, const float* weight, const float* bias, int64_t i,
                                 double mean, double rstd) {
  const int64_t f = feature_of(l, i);
  double y = (x[i] - mean) * rstd;
  if (weight) y *= weight[f];
  if (bias) y += bias[f];
  return y;
}

// dy of element i through the fused activation: ReLU's mask from the forward under test's output
// y (so both sides mask the same elements), the others' derivative at the float64 normalized value.
__device__ double activation_grad_ref(const Layout& l, const NormBackward& a, const float* y, int64_t i, double mean,
                                      double rstd) {
  if (a.activation == NormActivation::ReLU) return act::relu_backward(a.dy[i], y[i]);
  if (a.activation == NormActivation::None) return a.dy[i];
  return a.dy[i] * activation_grad_ref(a.activation, normalized_ref(l, a.x, a.weight, a.bias, i, mean, rstd));
}

// Sum over the block, as a fixed tree in shared memory; every thread gets the result.
__device__ double block_sum(double v) {
  __shared__ double s[kBlock];
  s[threadIdx.x] = v;
  __syncthreads();
  for (int o = kBlock / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o) s[threadIdx.x] += s[threadIdx.x + o];
    __syncthreads();
  }
  const double total = s[0];
  __syncthreads();
  return total;
}

// mean and biased variance of group g from x, two passes.
__device__ void group_moments(const Layout& l, const float* x, int64_t g, double& mean, double& var) {
  double s = 0;
  for (int64_t k = threadIdx.x; k < l.group_size; k += kBlock) s += x[element_of_group(l, g, k)];
  mean = block_sum(s) / static_cast<double>(l.group_size);
  double q = 0;
  for (int64_t k = threadIdx.x; k < l.group_size; k += kBlock) {
    const double d = x[element_of_group(l, g, k)] - mean;
    q += d * d;
  }
  var = block_sum(q) / static_cast<double>(l.group_size);
}

__global__ void reference_forward_kernel(const Layout l, const NormForward a) {
  for (int64_t g = blockIdx.x; g < l.groups; g += gridDim.x) {
    double mean, var;
    if (a.training) {
      group_moments(l, a.x, g, mean, var);
    } else {
      mean = a.running_mean[g];
      var = a.running_var[g];
    }
    const double rstd = 1.0 / sqrt(var + a.eps);
    if (threadIdx.x == 0) {
      a.mean[g] = static_cast<float>(mean);
      a.rstd[g] = static_cast<float>(rstd);
      if (a.training && a.running_mean) {
        const double m = static_cast<double>(l.group_size);
        a.running_mean[g] = static_cast<float>((1 - a.momentum) * a.running_mean[g] + a.momentum * mean);
        a.running_var[g] =
            static_cast<float>((1 - a.momentum) * a.running_var[g] + a.momentum * var * m / (m - 1));
      }
    }
    for (int64_t k = threadIdx.x; k < l.group_size; k += kBlock) {
      const int64_t i = element_of_group(l, g, k);
      const double y = normalized_ref(l, a.x, a.weight, a.bias, i, mean, rstd);
      a.y[i] = a.activation == NormActivation::ReLU ? act::relu_forward(static_cast<float>(y))
                                                    : static_cast<float>(activation_ref(a.activation, y));
    }
  }
}

// dx per group: dx = rstd * (w*g - SA/M - (x - mean) * rstd^2 * SB/M), SA = sum w*g,
// SB = sum w*g*(x - mean), g = dy through the fused activation (activation_grad_ref); dx = rstd * w * g when the
// statistics were constants. Also leaves each group's float64 mean and rstd for the weight/bias
// gradients.
__global__ void reference_backward_kernel(const Layout l, const NormBackward a, const float* __restrict__ y,
                                          double eps, double* __restrict__ group_mean,
                                          double* __restrict__ group_rstd) {
  const double m = static_cast<double>(l.group_size);
  for (int64_t g = blockIdx.x; g < l.groups; g += gridDim.x) {
    double mean, rstd;
    if (a.training) {
      double var;
      group_moments(l, a.x, g, mean, var);
      rstd = 1.0 / sqrt(var + eps);
    } else {
      mean = a.mean[g];
      rstd = a.rstd[g];
    }
    double sa = 0, sb = 0;
    for (int64_t k = threadIdx.x; k < l.group_size; k += kBlock) {
      const int64_t i = element_of_group(l, g, k);
      const double w = a.weight ? a.weight[feature_of(l, i)] : 1.0;
      const double gi = activation_grad_ref(l, a, y, i, mean, rstd);
      sa += w * gi;
      sb += w * gi * (a.x[i] - mean);
    }
    sa = block_sum(sa);
    sb = block_sum(sb);
    for (int64_t k = threadIdx.x; k < l.group_size; k += kBlock) {
      const int64_t i = element_of_group(l, g, k);
      const double w = a.weight ? a.weight[feature_of(l, i)] : 1.0;
      const double gi = activation_grad_ref(l, a, y, i, mean, rstd);
      const double dx = a.training ? rstd * (w * gi - sa / m - (a.x[i] - mean) * rstd * rstd * sb / m) : rstd * w * gi;
      a.dx[i] = static_cast<float>(dx);
    }
    if (threadIdx.x == 0) {
      group_mean[g] = mean;
      group_rstd[g] = rstd;
    }
  }
}

// dweight[f] = sum g * (x - mean) * rstd and dbias[f] = sum g over every element of feature f.
__global__ void reference_affine_kernel(const Layout l, const NormBackward a, const float* __restrict__ y,
                                        const double* __restrict__ group_mean, const double* __restrict__ group_rstd) {
  const int64_t count = l.rows * l.plane;
  for (int64_t f = blockIdx.x; f < l.features; f += gridDim.x) {
    double sw = 0, sb = 0;
    for (int64_t k = threadIdx.x; k < count; k += kBlock) {
      const int64_t i = element_of_feature(l, f, k), g = group_of(l, i);
      const double gi = activation_grad_ref(l, a, y, i, group_mean[g], group_rstd[g]);
      sw += gi * (a.x[i] - group_mean[g]) * group_rstd[g];
      sb += gi;
    }
    sw = block_sum(sw);
    sb = block_sum(sb);
    if (threadIdx.x == 0) {
      if (a.dweight) a.dweight[f] = static_cast<float>(sw);
      if (a.dbias) a.dbias[f] = static_cast<float>(sb);
    }
  }
}

unsigned grid_for(int64_t blocks) { return static_cast<unsigned>(cuda::grid_blocks(blocks, kBlock)); }

}  // namespace

void forward_reference_cuda(const NormLayout& l, const NormForward& a) {
  MINIDL_CHECK(a.training || (a.running_mean && a.running_var), "normalization oracle: eval needs running statistics");
  const Layout d = device_layout(l);
  reference_forward_kernel<<<grid_for(d.groups), kBlock, 0, cuda::stream()>>>(d, a);
  MINIDL_LAUNCH_CHECK();
}

void backward_reference_cuda(const NormLayout& l, const NormBackward& b, const float* y, double eps) {
  const Layout d = device_layout(l);
  std::shared_ptr<void> stats = allocate(2 * d.groups * sizeof(double), Device::cuda());
  double* group_mean = static_cast<double*>(stats.get());
  double* group_rstd = group_mean + d.groups;
  reference_backward_kernel<<<grid_for(d.groups), kBlock, 0, cuda::stream()>>>(d, b, y, eps, group_mean, group_rstd);
  MINIDL_LAUNCH_CHECK();
  if (b.dweight || b.dbias) {
    reference_affine_kernel<<<grid_for(d.features), kBlock, 0, cuda::stream()>>>(d, b, y, group_mean, group_rstd);
    MINIDL_LAUNCH_CHECK();
  }
}

}  // namespace minidl::norm
