// The benchmarks' data files (docs/perf/anchors.json, docs/perf/targets.json, compiled into
// minidl_bench): every figure minidl bench reads is there with its type, so a GPU run cannot stop
// on a mistyped key, and the copy compiled in is the file in the tree.
#include "bench/perf_data.h"
#include "train/config.h"
#include "test_util.h"

using namespace minidl;

TEST_CASE("perf data: the norm anchors and targets bench norm reads", "[bench]") {
  const NormAnchors a = norm_anchors();
  REQUIRE(a.copy_bandwidth > 1e12);
  REQUIRE(a.shapes.size() == 9);
  int large = 0;
  for (const NormAnchor& s : a.shapes) {
    large += s.large;
    REQUIRE(s.n * s.c * s.h * s.w > 0);
    for (int k = 0; k < 3; ++k) REQUIRE((s.fwd_ms[k] > 0 && s.bwd_ms[k] > 0));
  }
  REQUIRE(large == 8);  // the geometric means are over eight shapes
  REQUIRE(a.last_dim.size() == 2);
  const NormFp32Targets t = norm_fp32_targets();
  for (double x : t.fwd_speedup) REQUIRE(x >= 1);
  REQUIRE((t.single_read_fwd_x_floor >= 1 && t.single_read_bwd_x_floor >= 1));
  REQUIRE((t.last_dim_bandwidth_fraction > 0 && t.last_dim_bandwidth_fraction <= 1));
  const NormModeTargets m = norm_mode_targets();
  REQUIRE((m.speedup >= 1 && m.fwd_x_floor >= 1 && m.bwd_x_floor >= 1));
  REQUIRE(resnet9_conv_step_anchor().conv_ms > resnet9_conv_step_anchor().layout_conversion_ms);
}

TEST_CASE("perf data: the compiled-in files are the ones in docs/perf", "[bench]") {
  INFO("docs/perf changed since cmake last ran: re-run the build");
  REQUIRE(perf_anchors() == read_json_file(std::string(MINIDL_SOURCE_DIR) + "/docs/perf/anchors.json"));
  REQUIRE(perf_targets() == read_json_file(std::string(MINIDL_SOURCE_DIR) + "/docs/perf/targets.json"));
}
