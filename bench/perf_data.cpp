#include "bench/perf_data.h"

#include "core/error.h"

namespace minidl {

namespace {

// `j[key]` as a number, or an Error naming the file and key.
double number(const nlohmann::json& j, const char* file, const std::string& key) {
  MINIDL_CHECK(j.is_object() && j.contains(key) && j[key].is_number(), file, ": '", key, "' must be a number");
  return j[key].get<double>();
}
const nlohmann::json& section(const nlohmann::json& j, const char* file, const std::string& key) {
  MINIDL_CHECK(j.is_object() && j.contains(key) && (j[key].is_object() || j[key].is_array()), file, ": '", key,
               "' is missing");
  return j[key];
}
constexpr const char* kAnchors = "docs/perf/anchors.json";
constexpr const char* kTargets = "docs/perf/targets.json";

}  // namespace

NormAnchors norm_anchors() {
  const nlohmann::json& norm = section(perf_anchors(), kAnchors, "norm");
  NormAnchors out{number(perf_anchors(), kAnchors, "copy_bandwidth_bytes_per_s"), {}, {}};
  for (const nlohmann::json& s : section(norm, kAnchors, "shapes")) {
    NormAnchor a{};
    a.n = static_cast<int64_t>(number(s, kAnchors, "n"));
    a.c = static_cast<int64_t>(number(s, kAnchors, "c"));
    a.h = static_cast<int64_t>(number(s, kAnchors, "h"));
    a.w = static_cast<int64_t>(number(s, kAnchors, "w"));
    MINIDL_CHECK(s.contains("large") && s["large"].is_boolean(), kAnchors, ": 'large' must be true or false");
    a.large = s["large"].get<bool>();
    for (int k = 0; k < 3; ++k) {
      a.fwd_ms[k] = number(section(s, kAnchors, "fwd_ms"), kAnchors, kNormBenchLayers[k]);
      a.bwd_ms[k] = number(section(s, kAnchors, "bwd_ms"), kAnchors, kNormBenchLayers[k]);
    }
    out.shapes.push_back(a);
  }
  for (const nlohmann::json& s : section(norm, kAnchors, "layer_norm_last_dim"))
    out.last_dim.push_back({static_cast<int64_t>(number(s, kAnchors, "rows")),
                            static_cast<int64_t>(number(s, kAnchors, "d")), number(s, kAnchors, "fwd_ms"),
                            number(s, kAnchors, "bwd_ms")});
  return out;
}

NormFp32Targets norm_fp32_targets() {
  const nlohmann::json& t = section(perf_targets(), kTargets, "norm_fp32");
  NormFp32Targets out{};
  for (int k = 0; k < 3; ++k) out.fwd_speedup[k] = number(section(t, kTargets, "fwd_speedup"), kTargets, kNormBenchLayers[k]);
  out.single_read_fwd_x_floor = number(t, kTargets, "single_read_fwd_x_floor");
  out.single_read_bwd_x_floor = number(t, kTargets, "single_read_bwd_x_floor");
  out.small_tensor_bytes = number(t, kTargets, "small_tensor_bytes");
  out.small_tensor_ms = number(t, kTargets, "small_tensor_ms");
  out.last_dim_bandwidth_fraction = number(t, kTargets, "layer_norm_last_dim_bandwidth_fraction");
  return out;
}

NormModeTargets norm_mode_targets() {
  const nlohmann::json& t = section(perf_targets(), kTargets, "norm_mode");
  return {number(t, kTargets, "speedup"), number(t, kTargets, "large_tensor_bytes"), number(t, kTargets, "fwd_x_floor"),
          number(t, kTargets, "bwd_x_floor")};
}

ConvStepAnchor resnet9_conv_step_anchor() {
  const nlohmann::json& c = section(perf_anchors(), kAnchors, "resnet9_step_convolutions");
  return {number(c, kAnchors, "conv_ms"), number(c, kAnchors, "layout_conversion_ms")};
}

}  // namespace minidl
