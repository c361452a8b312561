// Fuzzes the safetensors reader and the checkpoint metadata on top of it: the bytes are a file.
// Any outcome but success or a minidl::Error (a crash, a sanitizer report, another exception
// escaping) is a bug.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "core/error.h"
#include "core/safetensors.h"
#include "train/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace minidl;
  static const std::string path = "/tmp/minidl_fuzz_safetensors." + std::to_string(::getpid());
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  try {
    const SafeTensors st = load_safetensors(path);
    for (const auto& kv : st.tensors) (void)kv.second.numel();
    (void)read_checkpoint_info(path);
  } catch (const Error&) {
  }
  return 0;
}
