#include "core/field_kinds.h"

namespace minidl {

namespace {

// Whole numbers print as integers ("1000000", not "1e+06").
std::string number_text(double v) {
  if (std::fabs(v) < 1e15 && v == std::floor(v)) return std::to_string(static_cast<int64_t>(v));
  return str(v);
}

}  // namespace

std::string IntRange::text() const {
  const bool no_lo = lo == std::numeric_limits<int64_t>::min(), no_hi = hi == std::numeric_limits<int64_t>::max();
  if (no_lo && no_hi) return "";
  if (no_hi) return str(">= ", lo);
  if (no_lo) return str("<= ", hi);
  return str(lo, "..", hi);
}

bool Interval::contains(double v) const {
  return std::isfinite(v) && (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
}

std::string Interval::text() const {
  const bool no_lo = std::isinf(lo), no_hi = std::isinf(hi);
  if (no_lo && no_hi) return "";
  if (no_hi) return (lo_open ? "> " : ">= ") + number_text(lo);
  if (no_lo) return (hi_open ? "< " : "<= ") + number_text(hi);
  return (lo_open ? "(" : "[") + number_text(lo) + ", " + number_text(hi) + (hi_open ? ")" : "]");
}

void fail_range(const JsonArgs& args, const std::string& key, const char* what, const std::string& range,
                const std::string& got) {
  const bool bounds = !range.empty() && (range[0] == '>' || range[0] == '<' || range[0] == '|');
  fail(str(args.key_path(key), ": expected ", what, bounds ? " " : " in ", range, ", got ", got));
}

}  // namespace minidl
