#include "bench/bench_allreduce.h"

#include <chrono>
#include <cstdio>
#include <functional>

#include "core/device.h"
#include "core/error.h"
#include "core/tensor.h"
#include "distributed/communicator.h"
#include "distributed/launch.h"
#include "distributed/ordered_reduce.h"

namespace minidl {

namespace {

// Seconds per call of `op`, all ranks starting together, after one warm-up call.
double seconds_per_call(Communicator& comm, Device device, int64_t iters, const std::function<void()>& op) {
  op();
  synchronize(device);
  comm.barrier();
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < iters; ++i) op();
  synchronize(device);
  comm.barrier();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / static_cast<double>(iters);
}

}  // namespace

int bench_allreduce(const BenchAllreduceOptions& options) {
  const int64_t max_mib = options.max_mib, iters = options.iters;
  const Launch launch = detect_launch();
  select_local_gpu(launch);
  const Device device = parse_device(options.device);
  const std::unique_ptr<Communicator> comm = make_communicator(options.dist, launch, device);
  const int world = comm->world_size();
  const double bus = 2.0 * (world - 1) / world;
  if (comm->rank() == 0) {
    std::printf("bench allreduce: world size %d (%s), %s, %lld iterations per size, float32\n", world, comm->backend(),
                device.str().c_str(), static_cast<long long>(iters));
    std::printf("%12s %12s %10s %10s %12s %10s %10s %8s\n", "bytes", "ordered us", "algbw GB/s", "busbw GB/s",
                "engine us", "algbw GB/s", "busbw GB/s", "ratio");
  }
  for (int64_t bytes = 4096; bytes <= max_mib * (int64_t{1} << 20); bytes *= 4) {
    const int64_t n = bytes / 4;
    Tensor rows = Tensor::full({1, n}, 1.0f, device);
    Tensor flat = Tensor::full({n}, 1.0f, device);
    const double ordered = seconds_per_call(*comm, device, iters, [&] { ordered_sum(*comm, rows); });
    const double engine = seconds_per_call(*comm, device, iters, [&] { comm->all_reduce_sum(flat); });
    if (comm->rank() != 0) continue;
    const double gb = static_cast<double>(bytes) / 1e9;
    std::printf("%12lld %12.1f %10.2f %10.2f %12.1f %10.2f %10.2f %8.2f\n", static_cast<long long>(bytes),
                ordered * 1e6, gb / ordered, gb / ordered * bus, engine * 1e6, gb / engine, gb / engine * bus,
                ordered / engine);
  }
  return 0;
}

}  // namespace minidl
