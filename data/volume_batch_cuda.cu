// The GPU side of data/volume_batch_kernel.h: a grid of (voxel blocks, batch), each thread one
// voxel of one volume: its channels converted and placed by the layout, and its label.
#include "core/cuda/kernel_helpers.cuh"
#include "core/cuda/runtime.h"
#include "core/dispatch.h"
#include "core/half_types.h"
#include "data/volume_batch_kernel.h"

namespace minidl::kernels {

namespace {

constexpr int kVolumeBatchBlock = 256;

template <class T, bool kChannelsLast>
__global__ void volume_batch_kernel(const float* __restrict__ images, const int32_t* __restrict__ labels,
                                    const int32_t* __restrict__ order, VolumeShape shape,
                                    const BatchCursor* __restrict__ cursor, int64_t offset, T* __restrict__ out,
                                    int32_t* __restrict__ out_labels) {
  const int64_t b = blockIdx.y;
  const int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (v >= shape.voxels) return;
  const int64_t index = order[cursor->position + offset + b];
  for (int64_t c = 0; c < shape.channels; ++c)
    out[volume_batch_offset(shape, b, c, v, kChannelsLast)] =
        from_float<T>(images[(index * shape.channels + c) * shape.voxels + v]);
  out_labels[b * shape.voxels + v] = labels[index * shape.voxels + v];
}

}  // namespace

void volume_batch_cuda(const float* images, const int32_t* labels, const int32_t* order, int64_t batch,
                       VolumeShape shape, const BatchCursor* cursor, int64_t offset, void* out, DType dtype,
                       bool channels_last, int32_t* out_labels) {
  if (batch == 0 || shape.voxels == 0) return;
  MINIDL_CHECK(batch <= 65535 && shape.voxels < (int64_t{1} << 40), "volume_batch (CUDA): ", batch, " volumes of ",
               shape.voxels, " voxels is too large for one launch");
  const dim3 grid(static_cast<unsigned>(cuda::ceil_div(shape.voxels, kVolumeBatchBlock)), static_cast<unsigned>(batch));
  dispatch_dtype(dtype, "volume_batch", [&](auto tag) {
    using T = decltype(tag);
    T* dst = static_cast<T*>(out);
    if (channels_last)
      volume_batch_kernel<T, true><<<grid, kVolumeBatchBlock, 0, cuda::stream()>>>(images, labels, order, shape, cursor,
                                                                                   offset, dst, out_labels);
    else
      volume_batch_kernel<T, false><<<grid, kVolumeBatchBlock, 0, cuda::stream()>>>(images, labels, order, shape,
                                                                                    cursor, offset, dst, out_labels);
  });
  MINIDL_LAUNCH_CHECK();
}

}  // namespace minidl::kernels
