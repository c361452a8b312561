#include "core/device.h"

#include "core/error.h"
#include "core/json_limits.h"
#include "core/versions.h"
#ifdef MINIDL_WITH_CUDA
#include "core/cuda/device_memory.h"
#endif

namespace minidl {

bool built_with_cuda() {
#ifdef MINIDL_WITH_CUDA
  return true;
#else
  return false;
#endif
}

bool cuda_available() {
#ifdef MINIDL_WITH_CUDA
  return cuda::device_present();
#else
  return false;
#endif
}

Device parse_device(const std::string& name) {
  if (name == "cpu") return Device::cpu();
  if (name == "auto") return cuda_available() ? Device::cuda() : Device::cpu();
  if (name == "cuda" || name == "cuda:0") {
    MINIDL_CHECK(built_with_cuda(), "device '", name, "': this minidl was built without CUDA");
    MINIDL_CHECK(cuda_available(), "device '", name, "': no CUDA GPU is available on this machine");
    return Device::cuda(0);
  }
  fail(str("unknown device '", text_excerpt(name), "' (expected cpu, cuda or auto)"));
}

int compute_capability(Device device) {
#ifdef MINIDL_WITH_CUDA
  if (device.is_cuda()) return cuda::compute_capability();
#endif
  MINIDL_CHECK(device.is_cpu(), "device ", device.str(), ": this minidl was built without CUDA");
  return 0;
}

std::string cuda_versions() {
#ifdef MINIDL_WITH_CUDA
  return cuda::versions();
#else
  return "built without CUDA";
#endif
}

void synchronize(Device device) {
#ifdef MINIDL_WITH_CUDA
  if (device.is_cuda()) cuda::synchronize_stream();
#else
  (void)device;
#endif
}

}  // namespace minidl
