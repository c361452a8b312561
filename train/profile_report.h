// Presenting a ProfileReport (train/profiler.h): the per-layer table for the terminal, the same
// numbers as JSON, and the Chrome trace of the last measured step (Perfetto, chrome://tracing).
// docs/profiling.md explains how to read them.
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "train/profiler.h"

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
