#include "optim/grad_clip.h"

#include <cmath>

#include "core/dispatch.h"
#include "core/error.h"
#include "optim/grad_clip_kernels.h"

namespace minidl {

namespace kernels {

namespace {

// The pairwise fold of kClipLanes lane sums the CUDA block does in shared memory.
float fold_lanes(float* lanes) {
  for (int w = kClipLanes / 2; w > 0; w /= 2)
    for (int l = 0; l < w; ++l) lanes[l] += lanes[l + w];
  return lanes[0];
}

}  // namespace

void clip_grad_norm_cpu(const std::vector<ClipTensor>& grads, float max_norm, float* partials, float* state) {
  float lanes[kClipLanes];
  int64_t count = 0;
  for (const ClipTensor& t : grads) {
    for (int64_t c = 0; c < clip_chunks(t.n); ++c) {
      for (int l = 0; l < kClipLanes; ++l) lanes[l] = clip_lane_sum(t.grad, t.n, c, l);
      partials[t.first_chunk + c] = fold_lanes(lanes);
    }
    count = t.first_chunk + clip_chunks(t.n);
  }
  for (int l = 0; l < kClipLanes; ++l) lanes[l] = clip_lane_total(partials, count, l);
  const float coef = clip_coef(fold_lanes(lanes), max_norm, &state[0]);
  state[1] = coef;
  for (const ClipTensor& t : grads)
    for (int64_t i = 0; i < t.n; ++i) t.grad[i] *= coef;
}

}  // namespace kernels

GradClipper::GradClipper(double max_norm, const std::vector<Tensor>& params, Device device)
    : max_norm_(max_norm), device_(device) {
  MINIDL_CHECK(std::isfinite(max_norm) && max_norm > 0, "grad_clip: expected a finite max_norm > 0, got ", max_norm);
  for (const Tensor& p : params) max_chunks_ += kernels::clip_chunks(p.numel());
  partials_ = Tensor::zeros({std::max<int64_t>(max_chunks_, 1)}, DType::Float32, device);
  state_ = Tensor::zeros({2}, DType::Float32, device);
}

void GradClipper::clip(const std::vector<Tensor>& grads) {
  std::vector<kernels::ClipTensor> list;
  int64_t chunks = 0;
  for (const Tensor& g : grads) {
    MINIDL_CHECK(g.defined() && g.dtype() == DType::Float32 && g.device() == device_ && g.is_contiguous(),
                 "grad_clip: expected contiguous float32 gradients on ", device_.str(), ", got ",
                 g.defined() ? g.str() : std::string("none"));
    list.push_back({g.data<float>(), g.numel(), chunks});
    chunks += kernels::clip_chunks(g.numel());
  }
  MINIDL_CHECK(chunks <= max_chunks_, "grad_clip: the gradients have ", chunks,
               " chunks, more than the parameters the clipper was made for (", max_chunks_, ")");
  const float max_norm = static_cast<float>(max_norm_);
  float* partials = partials_.data<float>();
  float* state = state_.data<float>();
  dispatch(
      device_, "clip_grad_norm", [&] { kernels::clip_grad_norm_cpu(list, max_norm, partials, state); },
      [&] { kernels::clip_grad_norm_cuda(list, max_norm, partials, state); });
}

float GradClipper::total_norm() const { return state_.to_vector()[0]; }

}  // namespace minidl
