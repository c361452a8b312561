// The whole-model memory check (layers/model_memory.h): the estimate read from the config matches
// what building allocates for every layer type, the peak it assumes is the peak the init path
// reaches, and a model larger than memory is refused before anything is allocated, naming its
// largest layer.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/allocator.h"
#include "core/error.h"
#include "core/init.h"
#include "apps/export_command.h"
#include "layers/model_memory.h"
#include "layers/registry.h"
#include "test_util.h"
#include "train/config.h"

using namespace minidl;
using nlohmann::json;

namespace {

using test::error_of;

int64_t state_bytes(const Module& m) {
  int64_t n = 0;
  for (const auto& [name, t] : m.state_dict()) n += static_cast<int64_t>(t.nbytes());
  return n;
}

int64_t largest_tensor_bytes(const Module& m) {
  int64_t n = 0;
  for (const auto& [name, t] : m.state_dict()) n = std::max(n, static_cast<int64_t>(t.nbytes()));
  return n;
}

// A line of /proc/self/status in bytes ("VmHWM", "VmRSS"); -1 when unknown.
int64_t status_bytes(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(key, 0) == 0) return std::stoll(line.substr(std::strlen(key) + 1)) * 1024;
  return -1;
}

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MINIDL_TEST_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define MINIDL_TEST_ASAN 1
#endif

}  // namespace

TEST_CASE("model memory: the estimate is what building allocates, for every layer type", "[hostile][model_memory]") {
  for (const LayerDescriptor* d : layer_descriptors()) {
    for (const LayerExample& e : layer_examples(*d)) {
      INFO(e.spec.dump());
      const ModelMemory m = estimate_model_memory(json::array({e.spec}), "model.layers");
      const std::shared_ptr<Module> built = build_layer(e.spec, "model.layers[0]");
      REQUIRE(m.state_bytes == state_bytes(*built));
      int64_t largest = 0;
      for (const LayerMemory& l : m.layers) largest = std::max(largest, l.largest_tensor_bytes);
      REQUIRE(largest == largest_tensor_bytes(*built));
    }
  }
  // Whole configs, containers and transformer blocks included.
  for (const char* name : {"quick_cpu.json", "airbench94_muon.json", "vit_tiny_cpu.json"}) {
    INFO(name);
    const std::string path = std::string(MINIDL_SOURCE_DIR) + "/configs/" + name;
    std::ifstream f(path);
    REQUIRE(f.good());
    const json layers = json::parse(f).at("model").at("layers");
    const ModelMemory m = estimate_model_memory(layers, "model.layers");
    REQUIRE(m.state_bytes == state_bytes(*build_sequential(layers, "model.layers")));
    REQUIRE_NOTHROW(check_model_fits(layers, "model.layers", Device::cpu()));
  }
}

TEST_CASE("model memory: the assumed peak is the one the init path reaches", "[hostile][model_memory]") {
#ifdef MINIDL_TEST_ASAN
  WARN("skipped under AddressSanitizer: its shadow memory and quarantine change the resident size");
  return;
#endif
  // 16M elements (64 MB): the weight, the drawn values and the tensor copied from them at once.
  const json layers = json::parse(R"([{"type": "Linear", "in_features": 4096, "out_features": 4096, "bias": false}])");
  const ModelMemory m = estimate_model_memory(layers, "model.layers");
  REQUIRE(m.host_peak_bytes == 3 * int64_t{4096} * 4096 * 4);
  const int64_t before = status_bytes("VmRSS");
  std::ofstream("/proc/self/clear_refs") << "5";  // resets VmHWM (the peak) to the current size
  if (before < 0 || status_bytes("VmHWM") > before + (8 << 20)) {
    WARN("no resettable peak resident size here (/proc/self/clear_refs)");
    return;
  }
  set_init_seed(0);
  const std::shared_ptr<Module> built = build_sequential(layers, "model.layers");
  const double growth = static_cast<double>(status_bytes("VmHWM") - before);
  INFO("peak growth " << growth / 1e6 << " MB, estimate " << m.host_peak_bytes / 1e6 << " MB");
  REQUIRE(growth > 0.9 * static_cast<double>(m.host_peak_bytes));
  REQUIRE(growth < 1.1 * static_cast<double>(m.host_peak_bytes));
}

TEST_CASE("model memory: a model larger than memory is refused at once, naming its largest layer",
          "[hostile][model_memory]") {
  const json layers = json::parse(R"([{"type": "Conv2d", "in_channels": 3, "out_channels": 8, "kernel_size": 3},
                                      {"type": "Linear", "in_features": 65536, "out_features": 32768}])");
  const ModelMemory m = estimate_model_memory(layers, "model.layers");
  REQUIRE(m.layers.size() == 2);
  const int64_t linear = 4 * (int64_t{65536} * 32768 + 32768);
  REQUIRE(m.state_bytes == 4 * (8 * 3 * 3 * 3 + 8) + linear);
  REQUIRE(m.host_peak_bytes == m.state_bytes + 2 * 4 * int64_t{65536} * 32768);
  const uint64_t gb = 1000000000;
  std::string msg = error_of([&] { check_model_memory(m, Device::cpu(), 16 * gb, 0); });
  REQUIRE(msg == "model.layers[1] (Linear 65536->32768): 8.6 GB of parameters and buffers; the model needs about "
                 "25.8 GB of host memory, 16.0 GB available");
  REQUIRE_NOTHROW(check_model_memory(m, Device::cpu(), 30 * gb, 0));
  REQUIRE_NOTHROW(check_model_memory(m, Device::cpu(), 0, 0));  // unknown: no check
  msg = error_of([&] { check_model_memory(m, Device::cuda(0), 30 * gb, 4 * gb); });
  REQUIRE_THAT(msg, Catch::EndsWith("the model needs about 8.6 GB of device memory, 4.0 GB available"));

  // With the memory this machine has: 64 Linear layers at the 2^31-element limit (550 GB of
  // parameters) inside a Sequential are refused in moments, and nothing is allocated.
  json huge = json::array();
  for (int i = 0; i < 64; ++i) huge.push_back({{"type", "Linear"}, {"in_features", 65536}, {"out_features", 32768}});
  const json model = json::array({{{"type", "Sequential"}, {"layers", huge}}});
  const size_t host_before = host_memory_stats().current_bytes;
  const auto start = std::chrono::steady_clock::now();
  msg = error_of([&] { check_model_fits(model, "model.layers", Device::cpu()); });
  REQUIRE(std::chrono::steady_clock::now() - start < std::chrono::seconds(2));
  REQUIRE(host_memory_stats().current_bytes == host_before);
  REQUIRE_THAT(msg, Catch::StartsWith("model.layers[0].layers[0] (Linear 65536->32768): 8.6 GB of parameters and "
                                      "buffers; the model needs about 566.9 GB of host memory"));

  // A bad spec gets the factory's own message, before any estimate.
  msg = error_of([] {
    estimate_model_memory(json::parse(R"([{"type": "Linear", "in_features": 0, "out_features": 2}])"), "model.layers");
  });
  REQUIRE_THAT(msg, Catch::StartsWith("model.layers[0].in_features: expected an integer in 1..2147483648, got 0"));
}

TEST_CASE("model memory: every way of building a model makes the check (build_sequential, build_layer, export)",
          "[hostile][model_memory]") {
  // Linear 32768->32768 layers (4.3 GB each): export built 25 of them one by one until the kernel
  // killed it, where train refused the same config at once. 100 are more than any machine holds.
  json huge = json::array();
  for (int i = 0; i < 100; ++i) huge.push_back({{"type", "Linear"}, {"in_features", 32768}, {"out_features", 32768}});
  const std::string want = "model.layers[0] (Linear 32768->32768): 4.3 GB of parameters and buffers; the model needs";
  const size_t host_before = host_memory_stats().current_bytes;
  const auto start = std::chrono::steady_clock::now();
  REQUIRE_THAT(error_of([&] { build_sequential(huge, "model.layers"); }), Catch::StartsWith(want));
  REQUIRE_THAT(error_of([&] {
                 build_layer({{"type", "Sequential"}, {"layers", huge}}, "model");
               }),
               Catch::StartsWith("model.layers[0] (Linear 32768->32768): 4.3 GB"));
  test::TempDir dir("export_memory");
  json config = read_json_file(std::string(MINIDL_SOURCE_DIR) + "/configs/quick_cpu.json");
  config["model"]["layers"] = huge;
  std::ofstream(dir.file("huge.json")) << config.dump();
  ExportOptions options;
  options.config_path = dir.file("huge.json");
  options.onnx_path = dir.file("huge.onnx");
  REQUIRE_THAT(error_of([&] { export_command(options); }), Catch::StartsWith(want));
  REQUIRE(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  REQUIRE(host_memory_stats().current_bytes == host_before);
  REQUIRE_FALSE(std::filesystem::exists(dir.file("huge.onnx")));
}
