#include <cstring>

#include "core/dispatch.h"
#include "core/half_types.h"
#include "data/volume_batch_kernel.h"

namespace minidl::kernels {

void volume_batch_cpu(const float* images, const int32_t* labels, const int32_t* order, int64_t batch,
                      VolumeShape shape, const BatchCursor* cursor, int64_t offset, void* out, DType dtype,
                      bool channels_last, int32_t* out_labels) {
  const int32_t* indices = order + cursor->position + offset;
  const int64_t voxels = shape.voxels, channels = shape.channels;
  dispatch_dtype(dtype, "volume_batch", [&](auto tag) {
    using T = decltype(tag);
    T* dst = static_cast<T*>(out);
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t index = indices[b];
      for (int64_t c = 0; c < channels; ++c) {
        const float* src = images + (index * channels + c) * voxels;
        for (int64_t v = 0; v < voxels; ++v)
          dst[volume_batch_offset(shape, b, c, v, channels_last)] = from_float<T>(src[v]);
      }
      std::memcpy(out_labels + b * voxels, labels + index * voxels, static_cast<size_t>(voxels) * sizeof(int32_t));
    }
  });
}

}  // namespace minidl::kernels
