// The GPU side of data/augment_kernel.h: builds the normalized, augmented float batch from the
// uint8 training set resident on the device, in one launch.
#include "core/cuda/runtime.h"
#include "data/augment_kernel.h"
#include "data/cifar10.h"

namespace minidl::kernels {

namespace {

constexpr int kAugmentBlock = 256;

// One block per image: the block's threads share one draw (made once, kept in shared memory)
// and walk the 3072 output floats in order, so each warp writes 128 contiguous bytes while the
// uint8 reads of a row stay within a few cache lines. Every thread reads the 64-byte cursor
// itself (one cached line; cheaper than staging it through shared memory with a barrier).
__global__ void augment_batch_kernel(const uint8_t* __restrict__ images,
                                     const int32_t* __restrict__ labels,
                                     const int32_t* __restrict__ order, const BatchCursor* __restrict__ cursor,
                                     float* __restrict__ out, int32_t* __restrict__ out_labels) {
  __shared__ ImageDraw draw;
  const AugmentParams p = cursor->params;
  const int64_t b = blockIdx.x;
  const int64_t index = order[cursor->position + b];
  if (threadIdx.x == 0) {
    draw = draw_image_augment(p, index);
    out_labels[b] = labels[index];
  }
  __syncthreads();
  const ImageDraw d = draw;
  const uint8_t* image = images + index * kCifarImageBytes;
  float* dst = out + b * kCifarImageBytes;
  for (int e = threadIdx.x; e < kCifarImageBytes; e += blockDim.x) {
    const int c = e >> 10, y = (e >> 5) & 31, x = e & 31;
    dst[e] = augment_pixel(image, d, p, c, y, x);
  }
}

}  // namespace

void augment_batch_cuda(const uint8_t* images, const int32_t* labels, const int32_t* order,
                        int64_t batch, const BatchCursor* cursor, float* out, int32_t* out_labels) {
  if (batch == 0) return;
  augment_batch_kernel<<<static_cast<unsigned>(batch), kAugmentBlock, 0, cuda::stream()>>>(
      images, labels, order, cursor, out, out_labels);
  MINIDL_LAUNCH_CHECK();
}

}  // namespace minidl::kernels
