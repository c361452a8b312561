// The float64 GPU oracle of the norm kernels (norm_reference.cu): one block per group, two passes,
// everything in double. The tests and `minidl bench norm` hold the fast path
// (layers/norm/norm_kernels.h) against it; it is no part of the training library.
#pragma once
#include "layers/norm/norm_kernels.h"

namespace minidl::norm {

// The oracle. Backward recomputes the batch statistics from x in float64 with `eps` (args.mean and
// args.rstd are read only when !training) and takes a fused ReLU's mask from y, the output of the
// forward under test, so both sides mask the same elements; a fused GELU's derivative is taken at
// the float64 normalized value.
void forward_reference_cuda(const NormLayout& layout, const NormForward& args);
void backward_reference_cuda(const NormLayout& layout, const NormBackward& args, const float* y, double eps);

}  // namespace minidl::norm
