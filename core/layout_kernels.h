// Launchers of the memory-format conversion behind Tensor::to(DType, MemoryFormat)
// (core/layout.cpp): `batch` matrices of rows x cols, each transposed (x [b][rows][cols] ->
// y [b][cols][rows]) and converted from dtype `from` to `to` in the same pass, one rounding per
// element as in core/cast_kernels.h. NCHW -> NHWC is (batch N, rows C, cols H*W); NHWC -> NCHW
// is (N, H*W, C). CPU and CUDA give the same bits (a pure reordering plus the shared conversion).
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace minidl::kernels {
void transpose_cast_cpu(const void* x, DType from, void* y, DType to, int64_t batch, int64_t rows, int64_t cols);
void transpose_cast_cuda(const void* x, DType from, void* y, DType to, int64_t batch, int64_t rows, int64_t cols);
}  // namespace minidl::kernels
