// The strided block copy behind cat_channels (layers/containers/skip_connection.cpp): `rows`
// blocks of `width` elements of T (float, bf16, fp16) from src (one every `src_pitch` elements)
// to dst (one every `dst_pitch`). A channel concatenation is two of them: NCDHW rows are samples
// (blocks of C*D*H*W elements), channels-last rows are voxels (blocks of C elements). A pure copy:
// CPU and CUDA give the same bits.
#pragma once
#include <cstdint>

namespace minidl::kernels {
template <class T>
void copy_rows_cpu(T* dst, int64_t dst_pitch, const T* src, int64_t src_pitch, int64_t width, int64_t rows);
template <class T>
void copy_rows_cuda(T* dst, int64_t dst_pitch, const T* src, int64_t src_pitch, int64_t width, int64_t rows);
}  // namespace minidl::kernels
