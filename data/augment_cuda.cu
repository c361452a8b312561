// The GPU side of data/augment_kernel.h: builds the normalized, augmented batch (float32 or a
// half type, NCHW or NHWC) from the uint8 training set resident on the device, in one launch.
#include "core/cast_kernels.h"
#include "core/dispatch.h"
#include "core/cuda/runtime.h"
#include "core/half_types.h"
#include "data/augment_kernel.h"

namespace minidl::kernels {

namespace {

constexpr int kAugmentBlock = 256;

// One block per image: the block's threads share one draw (made once, kept in shared memory)
// and walk the image's C * H * W outputs in memory order (NCHW or NHWC), so each warp writes 32
// consecutive elements while the uint8 reads stay within a few cache lines. Every thread reads
// the ~100-byte cursor itself (one or two cached lines; cheaper than staging it through shared memory with
// a barrier).
template <class T, bool kChannelsLast>
__global__ void augment_batch_kernel(const uint8_t* __restrict__ images,
                                     const int32_t* __restrict__ labels,
                                     const int32_t* __restrict__ order, const BatchCursor* __restrict__ cursor,
                                     int64_t offset, T* __restrict__ out, int32_t* __restrict__ out_labels) {
  __shared__ ImageDraw draw;
  const AugmentParams p = cursor->params;
  const int64_t b = blockIdx.x;
  const int64_t index = order[cursor->position + offset + b];
  if (threadIdx.x == 0) {
    draw = draw_image_augment(p, index);
    out_labels[b] = labels[index];
  }
  __syncthreads();
  const ImageDraw d = draw;
  const int64_t elements = augment_image_elements(p);
  const int plane = p.height * p.width;
  const uint8_t* image = images + index * elements;
  T* dst = out + b * elements;
  for (int e = threadIdx.x; e < elements; e += blockDim.x) {
    const int pixel = kChannelsLast ? e / p.channels : e % plane;
    const int c = kChannelsLast ? e - p.channels * pixel : e / plane, y = pixel / p.width, x = pixel - y * p.width;
    dst[e] = from_float<T>(augment_pixel(image, d, p, c, y, x));
  }
}

}  // namespace

void augment_batch_cuda(const uint8_t* images, const int32_t* labels, const int32_t* order, int64_t batch,
                        const BatchCursor* cursor, int64_t offset, void* out, DType dtype, bool channels_last,
                        int32_t* out_labels) {
  if (batch == 0) return;
  dispatch_dtype(dtype, "augment_batch", [&](auto tag) {
    using T = decltype(tag);
    T* dst = static_cast<T*>(out);
    const unsigned grid = static_cast<unsigned>(batch);
    if (channels_last)
      augment_batch_kernel<T, true>
          <<<grid, kAugmentBlock, 0, cuda::stream()>>>(images, labels, order, cursor, offset, dst, out_labels);
    else
      augment_batch_kernel<T, false>
          <<<grid, kAugmentBlock, 0, cuda::stream()>>>(images, labels, order, cursor, offset, dst, out_labels);
  });
  MINIDL_LAUNCH_CHECK();
}

}  // namespace minidl::kernels
