// MaxPool2d's most common shape on the CPU: kernel 2, stride 2, no padding, over planes of even
// height and width (every image network's down-sampling). The general scan (pooling_cpu.cpp)
// works out each window's bounds and walks it in two nested loops; this path reads two input rows
// per output row and compares the four cells in the same order, so the bits (values, argmax
// offsets, NaN and tie handling) are the general scan's, several times faster.
#pragma once
#include <cstdint>

#include "layers/pool/pooling_kernels.h"

namespace minidl::kernels {

// Whether the 2 x 2 path takes this pool.
inline bool max_pool2x2_applies(const Pool2dShape& s, const Pool2dGeometry& g) {
  return g.kernel_h == 2 && g.kernel_w == 2 && g.stride_h == 2 && g.stride_w == 2 && g.pad_h == 0 && g.pad_w == 0 &&
         s.H == 2 * s.OH && s.W == 2 * s.OW;
}

template <class Index>
void max_pool2x2_forward_cpu(const float* x, float* y, Index* argmax, const Pool2dShape& s);
template <class Index>
void max_pool2x2_backward_cpu(const float* dy, const Index* argmax, float* dx, const Pool2dShape& s);

}  // namespace minidl::kernels
