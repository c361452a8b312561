#include "core/cuda/runtime.h"
#include "core/cuda/side_stream.h"

#include <cstring>
#include <map>
#include <mutex>
#include <utility>

#include "core/cuda/device_memory.h"
#include "core/error.h"

namespace minidl::cuda {

void check(cudaError_t status, const char* expr, const char* file, int line) {
  if (status != cudaSuccess)
    fail(str("CUDA error ", cudaGetErrorName(status), " (", cudaGetErrorString(status), ") in ",
             expr, " at ", file, ":", line));
}

void check(cublasStatus_t status, const char* expr, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS)
    fail(str("cuBLAS error ", cublasGetStatusName(status), " in ", expr, " at ", file, ":", line));
}

void check(cudnnStatus_t status, const char* expr, const char* file, int line) {
  if (status != CUDNN_STATUS_SUCCESS)
    fail(str("cuDNN error ", cudnnGetErrorString(status), " in ", expr, " at ", file, ":", line));
}

namespace {

struct Runtime {
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  cudnnHandle_t cudnn = nullptr;
  cudaDeviceProp props{};

  Runtime() {
    MINIDL_CUDA_CHECK(cudaSetDevice(0));
    MINIDL_CUDA_CHECK(cudaGetDeviceProperties(&props, 0));
    MINIDL_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    MINIDL_CUDA_CHECK(cublasCreate(&cublas));
    MINIDL_CUDA_CHECK(cublasSetStream(cublas, stream));
    // cuBLAS would otherwise cudaMalloc a workspace of its own; give it one from the cache.
    constexpr size_t kCublasWorkspace = 32 << 20;
    MINIDL_CUDA_CHECK(cublasSetWorkspace(cublas, cached_malloc(kCublasWorkspace), kCublasWorkspace));
    MINIDL_CUDA_CHECK(cudnnCreate(&cudnn));
    MINIDL_CUDA_CHECK(cudnnSetStream(cudnn, stream));
  }
};

// Created on first use and never destroyed (handles outlive static tensors at exit).
Runtime& runtime() {
  static Runtime* r = new Runtime();
  return *r;
}

}  // namespace

namespace {
// A SideStream's, while it queues work (core/side_stream.h); per thread, so that another thread's
// work stays on the main stream.
thread_local cudaStream_t g_stream_override = nullptr;
}  // namespace

cudaStream_t stream() { return g_stream_override ? g_stream_override : runtime().stream; }
void* swap_stream(void* s) {
  void* previous = g_stream_override;
  g_stream_override = static_cast<cudaStream_t>(s);
  return previous;
}
void* create_stream() {
  runtime();
  cudaStream_t s = nullptr;
  MINIDL_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}
void destroy_stream(void* s) { cudaStreamDestroy(static_cast<cudaStream_t>(s)); }
void stream_wait(void* waiter, void* signaler) {
  cudaStream_t from = signaler ? static_cast<cudaStream_t>(signaler) : runtime().stream;
  cudaStream_t to = waiter ? static_cast<cudaStream_t>(waiter) : runtime().stream;
  cudaEvent_t event;
  MINIDL_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  MINIDL_CUDA_CHECK(cudaEventRecord(event, from));
  MINIDL_CUDA_CHECK(cudaStreamWaitEvent(to, event, 0));
  // The wait holds on to what it waits for: the event itself can go now.
  MINIDL_CUDA_CHECK(cudaEventDestroy(event));
}
cublasHandle_t cublas() { return runtime().cublas; }
cudnnHandle_t cudnn() { return runtime().cudnn; }
const cudaDeviceProp& props() { return runtime().props; }

int resident_blocks(int block_size) {
  const cudaDeviceProp& p = props();
  int per_sm = p.maxThreadsPerMultiProcessor / block_size;
  if (per_sm < 1) per_sm = 1;
  return p.multiProcessorCount * per_sm;
}

int resident_blocks_of(const void* kernel, int block_size) {
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, int> cache;
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_pair(kernel, block_size);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  int per_sm = 0;
  MINIDL_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, block_size, 0));
  const int blocks = (per_sm > 0 ? per_sm : 1) * props().multiProcessorCount;
  cache.emplace(key, blocks);
  return blocks;
}

void synchronize() { MINIDL_CUDA_CHECK(cudaStreamSynchronize(stream())); }
void synchronize_stream() { synchronize(); }

bool device_present() {
  static const bool present = [] {
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    (void)cudaGetLastError();
    return err == cudaSuccess && n > 0;
  }();
  return present;
}

int compute_capability() {
  // Read once, without creating the handles runtime() holds: a run resolves its config before it
  // builds anything.
  static const int capability = [] {
    int major = 0, minor = 0;
    MINIDL_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
    MINIDL_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0));
    return major * 10 + minor;
  }();
  return capability;
}

void copy(void* dst, const void* src, size_t bytes, CopyKind kind) {
  if (bytes == 0) return;
  cudaMemcpyKind k = kind == CopyKind::HostToDevice   ? cudaMemcpyHostToDevice
                     : kind == CopyKind::DeviceToHost ? cudaMemcpyDeviceToHost
                                                      : cudaMemcpyDeviceToDevice;
  MINIDL_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, k, stream()));
  // A host buffer may be freed or read as soon as we return: wait for copies that touch it.
  if (kind != CopyKind::DeviceToDevice) synchronize();
}

namespace {

// Host-to-device copies of a few bytes (a batch cursor, an optimizer's scalar table) go through a
// ring of pinned slots: the caller's buffer may be reused as soon as the call returns, and the
// copy itself is truly asynchronous (a copy from pageable memory may wait for the stream, or, on a
// system where the GPU reads pageable memory, read it late). Slot k is rewritten only once the
// event recorded behind its previous copy has completed, which with 64 slots almost never waits.
class UploadRing {
 public:
  static constexpr size_t kSlotBytes = 4096;

  UploadRing() {
    MINIDL_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&memory_), kSlotBytes * kSlots, cudaHostAllocDefault));
    for (cudaEvent_t& e : events_) MINIDL_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }

  void upload(void* dst, const void* src, size_t bytes) {
    const int k = next_;
    next_ = (next_ + 1) % kSlots;
    if (used_[k]) MINIDL_CUDA_CHECK(cudaEventSynchronize(events_[k]));
    char* slot = memory_ + static_cast<size_t>(k) * kSlotBytes;
    std::memcpy(slot, src, bytes);
    MINIDL_CUDA_CHECK(cudaMemcpyAsync(dst, slot, bytes, cudaMemcpyHostToDevice, stream()));
    MINIDL_CUDA_CHECK(cudaEventRecord(events_[k], stream()));
    used_[k] = true;
  }

 private:
  static constexpr int kSlots = 64;
  char* memory_ = nullptr;
  cudaEvent_t events_[kSlots] = {};
  bool used_[kSlots] = {};
  int next_ = 0;
};

// Never destroyed, like the runtime.
UploadRing& upload_ring() {
  static UploadRing* r = new UploadRing();
  return *r;
}

}  // namespace

void copy_async(void* dst, const void* src, size_t bytes, CopyKind kind) {
  if (bytes == 0) return;
  if (kind == CopyKind::HostToDevice) {
    // A graph would replay the copy from its staging slot, which later uploads rewrite: refused
    // inside a capture, so the capture fails and the step runs eagerly (graph_capture.cu).
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    MINIDL_CUDA_CHECK(cudaStreamIsCapturing(stream(), &capturing));
    MINIDL_CHECK(capturing == cudaStreamCaptureStatusNone,
                 "a host-to-device copy inside a CUDA graph capture (a replay would read its staging buffer after "
                 "later uploads rewrote it): upload before the captured step");
    if (bytes <= UploadRing::kSlotBytes)
      upload_ring().upload(dst, src, bytes);
    else
      copy(dst, src, bytes, kind);  // larger uploads (an epoch's order) wait; they are rare
    return;
  }
  // To the host: the destination is pinned memory (the caller's promise), so this is truly
  // asynchronous; device to device is stream work anyway.
  MINIDL_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes,
                                    kind == CopyKind::DeviceToHost ? cudaMemcpyDeviceToHost : cudaMemcpyDeviceToDevice,
                                    stream()));
}

void* pinned_malloc(size_t bytes) {
  void* p = nullptr;
  MINIDL_CUDA_CHECK(cudaHostAlloc(&p, bytes == 0 ? 1 : bytes, cudaHostAllocDefault));
  return p;
}

void pinned_free(void* ptr) {
  if (ptr) MINIDL_CUDA_CHECK(cudaFreeHost(ptr));
}

std::string versions() {
  // "12.4" from 12040; cuDNN 9 counts 90100 for 9.1.0, cuDNN 8 8906 for 8.9.6.
  auto cuda_text = [](int v) { return v <= 0 ? std::string("none") : str(v / 1000, ".", (v % 1000) / 10); };
  auto cudnn_text = [](size_t v) {
    return v >= 90000 ? str(v / 10000, ".", (v % 10000) / 100, ".", v % 100)
                      : str(v / 1000, ".", (v % 1000) / 100, ".", v % 100);
  };
  int runtime = 0, driver = 0;
  if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) runtime = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
  return str("CUDA runtime ", cuda_text(runtime), " (built with ", cuda_text(CUDART_VERSION), "), driver ",
             driver > 0 ? cuda_text(driver) : std::string("none (no NVIDIA driver)"), ", cuDNN ",
             cudnn_text(cudnnGetVersion()), " (built with ", cudnn_text(CUDNN_VERSION), ")");
}

}  // namespace minidl::cuda
