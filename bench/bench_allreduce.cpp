#include "bench/bench_allreduce.h"

#include <chrono>
#include <cstdio>
#include <functional>

#include "core/device.h"
#include "core/error.h"
#include "core/tensor.h"
#include "dist/communicator.h"
#include "dist/launch.h"
#include "dist/ordered_reduce.h"

namespace minidl {

namespace {

int64_t parse_count(const std::string& flag, const std::string& value, int64_t low, int64_t high) {
  try {
    size_t used = 0;
    const long long v = std::stoll(value, &used);
    if (used == value.size() && v >= low && v <= high) return v;
  } catch (const std::exception&) {
  }
  fail(str("bench allreduce: ", flag, " expects an integer in ", low, "..", high, ", got '", value, "'"));
}

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

int bench_allreduce_main(const std::vector<std::string>& args) {
  std::string device_name = "auto", backend = "auto";
  int64_t max_mib = 256, iters = 20;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    MINIDL_CHECK(i + 1 < args.size(), "bench allreduce: ", a, " needs a value (or unknown option)");
    const std::string& v = args[++i];
    if (a == "--device") device_name = v;
    else if (a == "--dist") backend = v;
    else if (a == "--max-mib") max_mib = parse_count(a, v, 1, 16384);
    else if (a == "--iters") iters = parse_count(a, v, 1, 100000);
    else fail(str("bench allreduce: unknown option '", a, "' (--device, --dist, --max-mib, --iters)"));
  }
  const Launch launch = detect_launch();
  select_local_gpu(launch);
  const Device device = parse_device(device_name);
  const std::unique_ptr<Communicator> comm = make_communicator(backend, launch, device);
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
