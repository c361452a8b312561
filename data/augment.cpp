#include <cmath>

#include "core/cast_kernels.h"
#include "core/dispatch.h"
#include "core/half_types.h"
#include "data/augment_kernel.h"

namespace minidl::kernels {

void augment_batch_cpu(const uint8_t* images, const int32_t* labels, const int32_t* order, int64_t batch,
                       const BatchCursor* cursor, int64_t offset, void* out, DType dtype, bool channels_last,
                       int32_t* out_labels) {
  const AugmentParams& p = cursor->params;
  const int32_t* indices = order + cursor->position + offset;
  const int64_t elements = augment_image_elements(p);
  dispatch_dtype(dtype, "augment_batch", [&](auto tag) {
    using T = decltype(tag);
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t index = indices[b];
      const ImageDraw d = draw_image_augment(p, index);
      const uint8_t* image = images + index * elements;
      T* dst = static_cast<T*>(out) + b * elements;
      for (int c = 0; c < p.channels; ++c)
        for (int y = 0; y < p.height; ++y)
          for (int x = 0; x < p.width; ++x)
            dst[augment_offset(p, c, y, x, channels_last)] = from_float<T>(augment_pixel(image, d, p, c, y, x));
      out_labels[b] = labels[index];
    }
  });
}

}  // namespace minidl::kernels
