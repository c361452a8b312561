// The copy engine's 2-D copy does the strided block copy in one call on the stream.
#include "core/cuda/runtime.h"
#include "core/dispatch.h"
#include "layers/containers/cat_kernels.h"

namespace minidl::kernels {

template <class T>
void copy_rows_cuda(T* dst, int64_t dst_pitch, const T* src, int64_t src_pitch, int64_t width, int64_t rows) {
  if (rows == 0 || width == 0) return;
  const size_t es = sizeof(T);
  MINIDL_CUDA_CHECK(cudaMemcpy2DAsync(dst, es * static_cast<size_t>(dst_pitch), src,
                                      es * static_cast<size_t>(src_pitch), es * static_cast<size_t>(width),
                                      static_cast<size_t>(rows), cudaMemcpyDeviceToDevice, cuda::stream()));
}

#define MINIDL_COPY_ROWS_CUDA(T) template void copy_rows_cuda<T>(T*, int64_t, const T*, int64_t, int64_t, int64_t);
MINIDL_FOR_FLOATING_TYPES(MINIDL_COPY_ROWS_CUDA)

}  // namespace minidl::kernels
