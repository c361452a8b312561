// Numbers as the run log prints them: fixed decimals, durations and clock times.
#pragma once
#include <string>

namespace minidl {

// `v` with `digits` decimals: fixed(0.12345, 2) = "0.12".
std::string fixed(double v, int digits);

// A duration for people: "42s", "3m07s", "2h05m" (rounded to the unit shown; negative: "0s").
std::string duration_text(double seconds);

// The UTC wall-clock time, ISO 8601 to the second: "2026-12-07T09:41:05Z".
std::string utc_timestamp();

}  // namespace minidl
