// The strided block copy behind cat_channels (layers/containers/skip_connection.cpp): `rows`
// blocks of `width` bytes from src (one every `src_pitch` bytes) to dst (one every `dst_pitch`).
// A channel concatenation is two of them: NCDHW rows are samples (blocks of C*D*H*W elements),
// channels-last rows are voxels (blocks of C elements). A pure copy: CPU and CUDA give the same bits.
#pragma once
#include <cstddef>

namespace minidl::kernels {
void copy_rows_cpu(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t rows);
void copy_rows_cuda(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t rows);
}  // namespace minidl::kernels
