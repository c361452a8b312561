// Where a tensor lives. A real field of every tensor from the start, so the CUDA backend is a
// second value here rather than a second tensor type.
#pragma once
#include <string>

namespace minidl {

enum class DeviceType : unsigned char { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  static Device cpu() { return {DeviceType::CPU, 0}; }
  static Device cuda(int i = 0) { return {DeviceType::CUDA, i}; }
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }
};

// True when this binary was built with the CUDA backend.
bool built_with_cuda();
// True when built with CUDA and a usable GPU is present.
bool cuda_available();
// "cpu", "cuda", "cuda:0" or "auto" (cuda when available, else cpu). Throws on anything else or
// on "cuda" when no GPU can be used.
Device parse_device(const std::string& name);
// The compute capability of the GPU `device` names, as major * 10 + minor (80 for an A100, 90 for
// an H100); 0 for the CPU.
int compute_capability(Device device);
// Waits until all work queued on `device` has finished (a no-op on the CPU).
void synchronize(Device device);

}  // namespace minidl
