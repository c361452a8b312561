// The Warp path of the normalization kernels (norm_warp_rows.cu): LayerNorm rows of at most
// kMaxWidth elements, each held in one warp's registers, forward and backward (with the weight and
// bias gradients) in float32, bfloat16 or float16 storage, or float32 x with a half y.
// norm_forward.cu and norm_backward.cu ask it first; where it does not cover a pass, the
// Block/Cluster/ThreeLaunch planner decides.
#pragma once
#include <cstddef>

#include "layers/norm/norm_kernels.h"

namespace minidl::norm::warp_rows {

// A lane holds at most 64 elements (16 accesses of 4 floats, 8 of 8 halves): 64 floats of x (and
// 64 of dy backward) in registers at 8 warps per CTA.
constexpr int kMaxLaneElements = 64;
constexpr int64_t kMaxWidth = 32 * kMaxLaneElements;

// How one pass runs on the Warp path; `runs` false when it does not (Auto then plans the others).
struct Plan {
  bool runs = false;
  bool vec = false;   // 16-byte accesses: 4 consecutive floats or 8 halves
  int elements = 0;   // per access: 4, or 8 for a half type's vector
  int accesses = 0;   // per lane: 1, 2, 4, 8 or 16
  int ctas = 0;       // persistent grid: warp w of the grid takes rows w, w + 8 * ctas, ...
  size_t smem = 0;    // backward with weight/bias gradients: each warp's per-feature sums
  bool affine = false;  // backward: dweight or dbias wanted (a second, small launch)
  NormRun run() const;
};

// The plans for these arguments and storage types: x and dx of T, y and dy of Y (the same type,
// or a half type with float32 x: norm_kernels.h's forward_float_half_cuda); args' own float
// pointers are ignored. A forced Warp path (args.path) that cannot run the pass is an error naming why.
template <class T, class Y>
Plan plan_forward(const NormLayout& l, const NormForward& a, const T* x, const Y* y);
template <class T, class Y>
Plan plan_backward(const NormLayout& l, const NormBackward& b, const T* x, const Y* dy, const T* dx);
template <class T, class Y>
void run_forward(const Plan& p, const NormLayout& l, const NormForward& a, const T* x, Y* y);
template <class T, class Y>
void run_backward(const Plan& p, const NormLayout& l, const NormBackward& b, const T* x, const Y* dy, T* dx);

}  // namespace minidl::norm::warp_rows
