// The device's limits, measured: the peak GEMM rate in the run's compute dtype and the copy
// bandwidth, the two roofs of the profiler's roofline (profiling/profile_report.h). On CUDA a large
// cuBLAS GEMM (tensor cores; float32 with or without TF32 as the run sets it) and a device-to-device
// cudaMemcpy; on the CPU an Eigen float GEMM on the run's threads and a memcpy. Measuring takes a
// few seconds, so the figures are cached per device in a small JSON file
// ($XDG_CACHE_HOME/minidl/device_limits.json, else ~/.cache/minidl/device_limits.json; the
// MINIDL_LIMITS_CACHE environment variable names another file), keyed by the device's name, its
// driver, the dtype and the measurement's version: a new driver or GPU measures again.
#pragma once
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "core/device.h"
#include "core/dtype.h"

namespace minidl {

struct DeviceLimits {
  std::string key;          // "NVIDIA H200 | driver 13.0 | bfloat16 | v1": what the cache is keyed by
  std::string device_name;  // "NVIDIA H200", "AMD EPYC 7B13 (2 threads)"
  std::string driver;       // CUDA driver version, or the kernel release and Eigen version on the CPU
  std::string dtype;        // "bfloat16", "float16", "float32" or "tf32"
  double peak_tflops = 0;   // FLOP/s of the GEMM / 1e12
  double copy_gbs = 0;      // bytes read + bytes written per second of the copy / 1e9
  std::string gemm;         // what was timed: "cuBLAS bfloat16 8192x8192x8192"
  std::string copy;         // "cudaMemcpy device to device 1024 MiB"
  std::string source;       // "measured" or "cached"
  std::string cache_path;   // the cache file ("" when none could be used)

  // Bytes per FLOP where the two roofs meet: layers below it are memory-bound at best.
  double ridge_flops_per_byte() const { return copy_gbs > 0 ? 1e3 * peak_tflops / copy_gbs : 0.0; }
  nlohmann::json to_json() const;
  static DeviceLimits from_json(const nlohmann::json& j);
};

// The dtype the GEMM is timed in for a run computing in `compute` ("tf32" for float32 with TF32
// allowed, on CUDA only).
std::string limits_dtype(Device device, DType compute, bool allow_tf32);

// The default cache file (see above); "" when no home or cache folder is known.
std::string default_limits_cache();

// The limits of `device` for `dtype` (limits_dtype's names): from `cache_path` when it holds an
// entry under the same key, else measured and stored there (written atomically; a cache that
// cannot be read or written only means measuring again, with a note on stderr).
// `fastest_tflops` is the highest rate the caller has just seen on the device (0: none). No layer
// runs faster than the GEMM roof, so a cached roof it beats by more than kBeatenRoofSlack was
// measured on a busy machine (other processes on the cores, a clock held down): the limits are
// measured again and the cache keeps the higher of each roof.
constexpr double kBeatenRoofSlack = 1.25;  // a layer's GEMM may beat the timed GEMM's shape a little
DeviceLimits device_limits(Device device, const std::string& dtype, const std::string& cache_path,
                           double fastest_tflops = 0);

// The same with the measurement and the device's identity given: what the tests drive.
struct LimitsProbe {
  std::string device_name, driver;
  std::function<DeviceLimits()> measure;  // fills the rates and what was timed
};
DeviceLimits cached_limits(const LimitsProbe& probe, const std::string& dtype, const std::string& cache_path,
                           double fastest_tflops = 0);

// The measurements themselves (no cache).
LimitsProbe cpu_limits_probe(const std::string& dtype);
#ifdef MINIDL_WITH_CUDA
LimitsProbe cuda_limits_probe(const std::string& dtype);
#endif

}  // namespace minidl
