// The CUDA measurements of train/device_limits.h: a cuBLAS GEMM on the tensor cores and a
// device-to-device copy, each timed with events as the fastest of several runs after a warm-up.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/cuda/runtime.h"
#include "core/error.h"
#include "train/device_limits.h"

namespace minidl {

namespace {

// Square enough to saturate the tensor cores of any current GPU (2 * 8192^3 = 1.1 TFLOP per call).
constexpr int kGemmSize = 8192;
constexpr size_t kCopyBytes = size_t{1} << 30;
constexpr int kWarmup = 3, kRuns = 10;

// Pseudo-random values in [-1, 1): all-zero operands draw less power and would clock higher than
// a real layer's.
__global__ void fill_kernel(uint8_t* p, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u;
    h ^= h >> 15;
    // Bytes of small floats in any of the dtypes: sign and low exponent bits vary, no NaN or Inf.
    p[i] = static_cast<uint8_t>((h & 0x3f) | ((h >> 8) & 0x80));
  }
}

struct DeviceBuffer {
  explicit DeviceBuffer(size_t bytes) : bytes(bytes) {
    MINIDL_CUDA_CHECK(cudaMalloc(&ptr, bytes));
    fill_kernel<<<cuda::resident_blocks(256), 256, 0, cuda::stream()>>>(static_cast<uint8_t*>(ptr), bytes);
    MINIDL_LAUNCH_CHECK();
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* ptr = nullptr;
  size_t bytes;
};

// The fastest of kRuns calls of `op`, in milliseconds, after kWarmup untimed ones.
template <class Op>
double fastest_ms(Op op) {
  cudaEvent_t start, stop;
  MINIDL_CUDA_CHECK(cudaEventCreate(&start));
  MINIDL_CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < kWarmup; ++i) op();
  double best = 1e30;
  for (int i = 0; i < kRuns; ++i) {
    MINIDL_CUDA_CHECK(cudaEventRecord(start, cuda::stream()));
    op();
    MINIDL_CUDA_CHECK(cudaEventRecord(stop, cuda::stream()));
    MINIDL_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    MINIDL_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    best = std::min(best, static_cast<double>(ms));
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return best;
}

DeviceLimits measure(const std::string& dtype) {
  cudaDataType_t type = CUDA_R_32F;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F_PEDANTIC;
  size_t element = 4;
  if (dtype == "bfloat16") {
    type = CUDA_R_16BF;
    compute = CUBLAS_COMPUTE_32F;
    element = 2;
  } else if (dtype == "float16") {
    type = CUDA_R_16F;
    compute = CUBLAS_COMPUTE_32F;
    element = 2;
  } else if (dtype == "tf32") {
    compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  } else {
    MINIDL_CHECK(dtype == "float32", "device limits: unknown dtype '", dtype, "'");
  }
  DeviceLimits l;
  {
    const size_t bytes = static_cast<size_t>(kGemmSize) * kGemmSize * element;
    DeviceBuffer a(bytes), b(bytes), c(bytes);
    const float alpha = 1.f, beta = 0.f;
    const double ms = fastest_ms([&] {
      MINIDL_CUDA_CHECK(cublasGemmEx(cuda::cublas(), CUBLAS_OP_N, CUBLAS_OP_N, kGemmSize, kGemmSize, kGemmSize,
                                     &alpha, a.ptr, type, kGemmSize, b.ptr, type, kGemmSize, &beta, c.ptr, type,
                                     kGemmSize, compute, CUBLAS_GEMM_DEFAULT));
    });
    l.peak_tflops = 2.0 * kGemmSize * kGemmSize * static_cast<double>(kGemmSize) / (ms * 1e-3) / 1e12;
    l.gemm = str("cuBLAS ", dtype, " ", kGemmSize, "x", kGemmSize, "x", kGemmSize, " (fastest of ", kRuns, ")");
  }
  {
    DeviceBuffer src(kCopyBytes), dst(kCopyBytes);
    const double ms = fastest_ms([&] {
      MINIDL_CUDA_CHECK(cudaMemcpyAsync(dst.ptr, src.ptr, kCopyBytes, cudaMemcpyDeviceToDevice, cuda::stream()));
    });
    l.copy_gbs = 2.0 * static_cast<double>(kCopyBytes) / (ms * 1e-3) / 1e9;
    l.copy = str("cudaMemcpy device to device ", kCopyBytes >> 20, " MiB, read + write (fastest of ", kRuns, ")");
  }
  return l;
}

}  // namespace

LimitsProbe cuda_limits_probe(const std::string& dtype) {
  LimitsProbe p;
  const cudaDeviceProp& props = cuda::props();
  p.device_name = props.name;
  int driver = 0;
  MINIDL_CUDA_CHECK(cudaDriverGetVersion(&driver));
  p.driver = str("CUDA driver ", driver / 1000, ".", (driver % 1000) / 10, ", ", props.multiProcessorCount, " SMs");
  p.measure = [dtype] { return measure(dtype); };
  return p;
}

}  // namespace minidl
