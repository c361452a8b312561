// The figures the benchmarks compare with, kept as data beside the records that explain them:
// PyTorch's timings on the H200 (docs/perf/anchors.json) and the speed targets
// (docs/perf/targets.json). bench/CMakeLists.txt compiles both files in, so a minidl carried to
// the GPU machine needs no source tree; editing either re-runs cmake. Each reader below takes
// the part it needs once, typed; a missing or mistyped key is an Error naming it.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace minidl {

// The two files as parsed JSON.
const nlohmann::json& perf_anchors();
const nlohmann::json& perf_targets();

// The normalization layers minidl bench norm times, in the order of its tables.
constexpr const char* kNormBenchLayers[3] = {"BatchNorm2d", "GroupNorm", "LayerNorm"};

// PyTorch's time for one (N, C, H, W) shape, ms per call, per layer of kNormBenchLayers.
struct NormAnchor {
  int64_t n, c, h, w;
  double fwd_ms[3], bwd_ms[3];
  bool large;  // one of the eight shapes the geometric means are taken over
};
// LayerNorm over the last dim (transformer shapes): rows x d.
struct LastDimAnchor {
  int64_t rows, d;
  double fwd_ms, bwd_ms;
};
struct NormAnchors {
  double copy_bandwidth;  // bytes/s read + written by a 1 GiB device-to-device copy
  std::vector<NormAnchor> shapes;
  std::vector<LastDimAnchor> last_dim;
};
NormAnchors norm_anchors();

// fp32 NCHW against the anchors: forward speedup per layer (geometric mean over the large
// shapes), single-read passes within a multiple of the memory floor, small tensors within a time,
// LayerNorm over the last dim at a fraction of the copy bandwidth.
struct NormFp32Targets {
  double fwd_speedup[3];
  double single_read_fwd_x_floor, single_read_bwd_x_floor;
  double small_tensor_bytes, small_tensor_ms;
  double last_dim_bandwidth_fraction;
};
// bf16/fp16 or channels_last against PyTorch in the same mode: speedup forward and backward,
// and on large tensors forward and backward within a multiple of the floor.
struct NormModeTargets {
  double speedup;
  double large_tensor_bytes, fwd_x_floor, bwd_x_floor;
};
NormFp32Targets norm_fp32_targets();
NormModeTargets norm_mode_targets();

// ResNet-9's convolutions per training step in PyTorch (batch 512, TF32), ms, and the part of it
// spent converting NCHW <-> NHWC.
struct ConvStepAnchor {
  double conv_ms, layout_conversion_ms;
};
ConvStepAnchor resnet9_conv_step_anchor();

}  // namespace minidl
