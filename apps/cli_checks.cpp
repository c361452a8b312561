// Checks of command-line values that CLI11's own validators get wrong for users: CLI::Range on an
// integer option reports "1.5" as "not in range" rather than not a whole number.
#include <charconv>

#include "apps/commands.h"
#include "core/error.h"
#include "core/json_limits.h"

namespace minidl {

CLI::Validator whole_number(int64_t lo, int64_t hi) {
  const std::string range = hi == std::numeric_limits<int64_t>::max() ? str(">= ", lo) : str(lo, "..", hi);
  return CLI::Validator(
      [lo, hi, range](std::string& text) -> std::string {
        int64_t v = 0;
        const char* end = text.data() + text.size();
        const auto r = std::from_chars(text.data(), end, v);
        if (r.ec == std::errc::result_out_of_range) return str("must be ", range, ", got ", text_excerpt(text));
        if (text.empty() || r.ec != std::errc() || r.ptr != end)
          return str("must be a whole number (", range, "), got ", text_excerpt(text));
        if (v < lo || v > hi) return str("must be ", range, ", got ", v);
        return std::string();
      },
      str("INT ", range));
}

}  // namespace minidl
