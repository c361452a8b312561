// Checked errors. A user mistake (bad config, missing file, shape mismatch) and an internal
// failure (a CUDA call) both throw minidl::Error with one message that names what went wrong;
// the command line catches it, prints it and exits non-zero.
#pragma once
#include <charconv>
#include <cmath>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace minidl {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {
inline void format_into(std::ostringstream&) {}
// A double or float as the shortest text that reads back as the same value, whole numbers as
// integers: a value the user wrote (1000001, 1.0000001, -0) is echoed as written, where operator<<
// rounds to 6 digits ("1e+06", "1", "0").
template <class T>
void put_number(std::ostringstream& os, T v) {
  if (v == std::floor(v) && std::fabs(v) < T(1e15) && !(v == 0 && std::signbit(v))) {
    os << static_cast<long long>(v);
    return;
  }
  char text[64];
  const std::to_chars_result r = std::to_chars(text, text + sizeof text, v);
  os.write(text, r.ptr - text);
}
template <class T, class... Rest>
void format_into(std::ostringstream& os, const T& first, const Rest&... rest) {
  if constexpr (std::is_floating_point_v<T>)
    put_number(os, first);
  else
    os << first;
  format_into(os, rest...);
}
}  // namespace detail

// Concatenates its arguments with operator<<: str("layer ", name, " expects ", n, " channels").
template <class... Args>
std::string str(const Args&... args) {
  std::ostringstream os;
  detail::format_into(os, args...);
  return os.str();
}

[[noreturn]] inline void fail(const std::string& message) { throw Error(message); }

}  // namespace minidl

// MINIDL_CHECK(cond, parts...): throws minidl::Error("parts...") when cond is false.
#define MINIDL_CHECK(cond, ...)                                   \
  do {                                                            \
    if (!(cond)) ::minidl::fail(::minidl::str(__VA_ARGS__));      \
  } while (0)

// Internal invariant: names the file and line, since it is our bug, not the user's.
#define MINIDL_ASSERT(cond)                                                                  \
  do {                                                                                       \
    if (!(cond))                                                                             \
      ::minidl::fail(::minidl::str("internal error: ", #cond, " failed at ", __FILE__, ":", \
                                   __LINE__));                                               \
  } while (0)
