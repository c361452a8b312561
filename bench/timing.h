// What the benchmarks share (bench/bench_conv.cpp, bench_depthwise.cpp, bench_attention.cpp):
// benchmark inputs and the stream time of a call.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#ifdef MINIDL_WITH_CUDA
#include "core/cuda/profiler_events.h"
#endif

namespace minidl::bench_timing {

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Benchmark inputs: uniform in [-1, 1) from a xorshift generator (fast for 30M values; the values
// only need to be non-trivial so no kernel gets an easy case like all zeros).
inline std::vector<float> bench_values(int64_t n, uint32_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  uint32_t s = seed * 2654435761u + 1;
  for (float& e : v) {
    s ^= s << 13;
    s ^= s >> 17;
    s ^= s << 5;
    e = static_cast<float>(s >> 8) * (2.0f / 16777216.0f) - 1.0f;
  }
  return v;
}

#ifdef MINIDL_WITH_CUDA
// Stream time per call from CUDA events around `calls` back-to-back calls (launch gaps included,
// as in a training step), median over `repeat` such spans, after one warm-up call (where a cuDNN
// plan or cuBLAS's kernels are chosen and the allocator caches its blocks). stall_ms > 0 queues a
// stall of that long before each span, so the host has launched the span by the time the GPU
// reaches it: the GPU's own time, without the gaps of a slow host.
inline double time_cuda_ms(const std::function<void()>& fn, int repeat, double stall_ms = 0) {
  const int calls = 20;
  fn();
  cuda::TimingEvents ev;
  std::vector<double> per_call, ms;
  for (int r = 0; r < repeat; ++r) {
    if (stall_ms > 0) cuda::stall_stream(stall_ms);
    ev.record(0);
    for (int i = 0; i < calls; ++i) fn();
    ev.record(1);
    ev.read_ms(2, ms);
    per_call.push_back(ms[1] / calls);
  }
  return median(per_call);
}
#endif

}  // namespace minidl::bench_timing
