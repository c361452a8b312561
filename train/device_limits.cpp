#include "train/device_limits.h"

#include <sys/utsname.h>

#include <Eigen/Dense>
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <vector>

#include "core/atomic_file.h"
#include "core/error.h"
#include "train/text_format.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace minidl {

namespace {

// Bumped when what is measured changes, so old cache entries are measured again.
constexpr int kLimitsVersion = 1;
// An Eigen float GEMM large enough to leave the caches behind and run for a fraction of a second
// on a few cores, and a copy far larger than the last-level cache.
constexpr int kCpuGemmSize = 1024;
constexpr size_t kCpuCopyBytes = size_t{256} << 20;
constexpr int kCpuRuns = 3;

using Clock = std::chrono::steady_clock;

template <class Op>
double fastest_seconds(Op op) {
  op();  // warm-up: page faults, thread start
  double best = 1e30;
  for (int i = 0; i < kCpuRuns; ++i) {
    const Clock::time_point t0 = Clock::now();
    op();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  return "CPU";
}

int cpu_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

DeviceLimits measure_cpu(const std::string& dtype) {
  MINIDL_CHECK(dtype == "float32", "device limits: the CPU computes in float32, not '", dtype, "'");
  DeviceLimits l;
  {
    using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic>;
    const Matrix a = Matrix::Random(kCpuGemmSize, kCpuGemmSize), b = Matrix::Random(kCpuGemmSize, kCpuGemmSize);
    Matrix c(kCpuGemmSize, kCpuGemmSize);
    const double s = fastest_seconds([&] { c.noalias() = a * b; });
    l.peak_tflops = 2.0 * kCpuGemmSize * kCpuGemmSize * static_cast<double>(kCpuGemmSize) / s / 1e12;
    l.gemm = str("Eigen float32 ", kCpuGemmSize, "x", kCpuGemmSize, "x", kCpuGemmSize, " on ", cpu_threads(),
                 " threads (fastest of ", kCpuRuns, ")");
  }
  {
    std::vector<char> src(kCpuCopyBytes, 1), dst(kCpuCopyBytes, 0);
    const double s = fastest_seconds([&] { std::memcpy(dst.data(), src.data(), kCpuCopyBytes); });
    l.copy_gbs = 2.0 * static_cast<double>(kCpuCopyBytes) / s / 1e9;
    l.copy = str("memcpy ", kCpuCopyBytes >> 20, " MiB, read + write (fastest of ", kCpuRuns, ")");
  }
  return l;
}

nlohmann::json read_cache(const std::string& path) {
  std::ifstream in(path);
  if (!in) return nlohmann::json::object();
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("entries") || !j["entries"].is_object()) {
    std::cerr << "minidl: ignoring the device limits cache '" << path << "' (not a limits cache); measuring again\n";
    return nlohmann::json::object();
  }
  return j;
}

}  // namespace

nlohmann::json DeviceLimits::to_json() const {
  return {{"key", key},       {"device_name", device_name}, {"driver", driver}, {"dtype", dtype},
          {"peak_tflops", peak_tflops}, {"copy_gbs", copy_gbs}, {"gemm", gemm}, {"copy", copy},
          {"source", source}, {"cache_path", cache_path},   {"ridge_flops_per_byte", ridge_flops_per_byte()}};
}

DeviceLimits DeviceLimits::from_json(const nlohmann::json& j) {
  DeviceLimits l;
  l.key = j.value("key", "");
  l.device_name = j.value("device_name", "");
  l.driver = j.value("driver", "");
  l.dtype = j.value("dtype", "");
  l.peak_tflops = j.value("peak_tflops", 0.0);
  l.copy_gbs = j.value("copy_gbs", 0.0);
  l.gemm = j.value("gemm", "");
  l.copy = j.value("copy", "");
  l.source = j.value("source", "");
  l.cache_path = j.value("cache_path", "");
  return l;
}

std::string limits_dtype(Device device, DType compute, bool allow_tf32) {
  if (device.is_cpu()) return "float32";
  switch (compute) {
    case DType::BFloat16: return "bfloat16";
    case DType::Float16: return "float16";
    default: return allow_tf32 ? "tf32" : "float32";
  }
}

std::string default_limits_cache() {
  if (const char* p = std::getenv("MINIDL_LIMITS_CACHE"); p && *p) return p;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/minidl/device_limits.json";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/minidl/device_limits.json";
  return "";
}

DeviceLimits cached_limits(const LimitsProbe& probe, const std::string& dtype, const std::string& cache_path,
                           double fastest_tflops) {
  const std::string key = str(probe.device_name, " | ", probe.driver, " | ", dtype, " | v", kLimitsVersion);
  nlohmann::json cache = cache_path.empty() ? nlohmann::json::object() : read_cache(cache_path);
  std::optional<DeviceLimits> beaten;
  if (cache.contains("entries") && cache["entries"].contains(key)) {
    DeviceLimits l = DeviceLimits::from_json(cache["entries"][key]);
    if (l.peak_tflops > 0 && l.copy_gbs > 0) {
      if (fastest_tflops <= l.peak_tflops * kBeatenRoofSlack) {
        l.source = "cached";
        l.cache_path = cache_path;
        return l;
      }
      beaten = l;
    }
  }
  DeviceLimits l = probe.measure();
  l.key = key;
  l.device_name = probe.device_name;
  l.driver = probe.driver;
  l.dtype = dtype;
  l.source = "measured";
  if (beaten) {
    // Measured again on what may still be a busy machine: neither roof goes down.
    if (beaten->peak_tflops > l.peak_tflops) {
      l.peak_tflops = beaten->peak_tflops;
      l.gemm = beaten->gemm;
    }
    if (beaten->copy_gbs > l.copy_gbs) {
      l.copy_gbs = beaten->copy_gbs;
      l.copy = beaten->copy;
    }
    l.source = str("measured again (a layer ran at ", fixed(fastest_tflops, 3),
                   " TFLOP/s, above the cached GEMM roof of ", fixed(beaten->peak_tflops, 3), ")");
  }
  if (!cache_path.empty()) {
    try {
      const std::filesystem::path parent = std::filesystem::path(cache_path).parent_path();
      if (!parent.empty()) std::filesystem::create_directories(parent);
      nlohmann::json entry = l.to_json();
      entry.erase("source");
      entry.erase("cache_path");
      cache["entries"][key] = entry;
      write_file_atomic(cache_path, cache.dump(2) + "\n", "device limits cache");
      l.cache_path = cache_path;
    } catch (const std::exception& e) {
      std::cerr << "minidl: could not cache the device limits (" << e.what() << "); they will be measured again\n";
    }
  }
  return l;
}

LimitsProbe cpu_limits_probe(const std::string& dtype) {
  LimitsProbe p;
  p.device_name = str(cpu_model(), " (", cpu_threads(), " threads)");
  struct utsname u;
  p.driver = str("Linux ", uname(&u) == 0 ? u.release : "?", ", Eigen ", EIGEN_WORLD_VERSION, ".", EIGEN_MAJOR_VERSION,
                 ".", EIGEN_MINOR_VERSION);
  p.measure = [dtype] { return measure_cpu(dtype); };
  return p;
}

DeviceLimits device_limits(Device device, const std::string& dtype, const std::string& cache_path,
                           double fastest_tflops) {
  if (device.is_cpu()) return cached_limits(cpu_limits_probe(dtype), dtype, cache_path, fastest_tflops);
#ifdef MINIDL_WITH_CUDA
  return cached_limits(cuda_limits_probe(dtype), dtype, cache_path, fastest_tflops);
#else
  fail(str("device limits: ", device.str(), " needs a minidl built with CUDA"));
#endif
}

}  // namespace minidl
