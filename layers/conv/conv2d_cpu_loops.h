// What the CPU convolutions share (conv2d_cpu.cpp, conv2d_depthwise_cpu.cpp): when to go
// parallel, the loop that hands out independent tasks, and the columns a kernel tap reads inside
// the image. Plain C++ with OpenMP.
#pragma once
#include <omp.h>

#include <cstdint>

namespace minidl::kernels {

// Below this many FLOPs a convolution runs on the calling thread: waking the OpenMP team costs
// microseconds when the cores are idle and a scheduler time slice when another process holds
// one of them, which made the finite-difference tests (thousands of tiny convolutions) 50x
// slower on a busy 2-core machine. Results do not depend on the thread count, so this is safe.
constexpr double kParallelFlops = 4e6;

// Runs body(i) for i in [0, n): on the OpenMP team, chunks handed out dynamically, when the
// problem is big enough; on this thread otherwise. Either way Eigen sees one thread: in a team of
// two Eigen stays serial by itself, and setting this region's own thread count to 1 keeps it
// serial in a team of one too (it would otherwise start its own threads from the global count).
template <class Body>
inline void for_each_chunk(int64_t n, bool parallel, Body&& body) {
#pragma omp parallel if (parallel)
  {
    omp_set_num_threads(1);
#pragma omp for schedule(dynamic)
    for (int64_t i = 0; i < n; ++i) body(i);
  }
}

// The output columns ow whose input column ow*sw - pw + j lies inside [0, w): [lo, hi).
inline void valid_range(int64_t out, int64_t in, int64_t stride, int64_t pad, int64_t j, int64_t& lo, int64_t& hi) {
  lo = 0;
  while (lo < out && lo * stride - pad + j < 0) ++lo;
  hi = out;
  while (hi > lo && (hi - 1) * stride - pad + j >= in) --hi;
}

}  // namespace minidl::kernels
