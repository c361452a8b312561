// Presenting a ProfileReport (profiling/profiler.h): the per-layer table for the terminal, the same
// numbers as JSON, and the Chrome trace of the last measured step (Perfetto, chrome://tracing).
// docs/profiling.md explains how to read them.
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "profiling/profiler.h"

namespace minidl {

// The table: one line per row (modules indented under their parents) with forward and backward
// GPU and host milliseconds and the row's share of the step (GPU share on CUDA, host share on
// the CPU, where there are no GPU columns), then the total and the step's wall time. Pass the
// wall time of an unprofiled step, timed the same way (from the step's start to a synchronize
// after it), when known: the table then shows what profiling itself costs; and that of a step
// replayed as a CUDA graph, timed the same way, to show beside it.
std::string format_profile_table(const ProfileReport& report,
                                 std::optional<double> unprofiled_step_ms = std::nullopt,
                                 std::optional<double> graphed_step_ms = std::nullopt);

// The roofline of one pass (forward or backward) of a row: its work over its time (GPU time on
// CUDA, host time on the CPU) against the report's limits.
struct PassRoofline {
  bool known = false;   // the row reported its work and ran this pass
  double flops = 0, bytes = 0, ms = 0;
  double tflops = 0, gbs = 0;  // achieved
  // Of the roof at the pass's arithmetic intensity: the time the limits allow (the larger of
  // FLOPs / peak rate and bytes / copy bandwidth) over the time taken. < 0 without limits.
  double fraction_of_limit = -1;
  // "compute" or "memory" (the roof it is under: intensity above or below the ridge), "cache"
  // where it moves its bytes faster than the copy roof (a working set that stays in a cache, so
  // its fraction above 1 says no more than that), or "latency" where it reaches under
  // kLatencyBoundFraction of either roof (launches, latency, or a kernel far from the hardware);
  // "" without limits.
  std::string bound;
};
constexpr double kLatencyBoundFraction = 0.10;
PassRoofline pass_roofline(const ProfileReport& report, const ProfileRow& row, bool backward);

// The second table: per row and pass with work, GFLOP, MB, achieved TFLOP/s and GB/s, % of the
// limit and the bound, under a line stating the limits; then the memory: the step's peak and
// the row that reached it. Rows that do no work of their own (containers, views) are left out.
std::string format_roofline_table(const ProfileReport& report);

// {"device", "measured_steps", "statistic", "rows": [...], "total": {...}, "step": {...}}; GPU
// fields appear only when the report was timed on a GPU.
nlohmann::json profile_json(const ProfileReport& report,
                            std::optional<double> unprofiled_step_ms = std::nullopt,
                            std::optional<double> graphed_step_ms = std::nullopt);

// Chrome trace event format: {"traceEvents": [...], "displayTimeUnit": "ms"} with one "X"
// (complete) event per span, ts/dur in microseconds, a host track and, on CUDA, a GPU track.
nlohmann::json chrome_trace_json(const ProfileReport& report);

// Write the JSON above to `path` (errors name the path when it cannot be written).
void write_profile_json(const ProfileReport& report, const std::string& path,
                        std::optional<double> unprofiled_step_ms = std::nullopt,
                        std::optional<double> graphed_step_ms = std::nullopt);
void write_chrome_trace(const ProfileReport& report, const std::string& path);

}  // namespace minidl
