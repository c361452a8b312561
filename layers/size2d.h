// A (height, width) pair of a 2-D window (kernel, stride, padding); one number means both, as
// PyTorch's int-or-tuple arguments.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace minidl {

struct Size2d {
  int64_t h, w;
  Size2d() : Size2d(0) {}
  Size2d(int64_t v) : h(v), w(v) {}  // NOLINT(google-explicit-constructor): conv2d(x, w, b, 1, 1)
  Size2d(int64_t h_, int64_t w_) : h(h_), w(w_) {}
  bool square() const { return h == w; }
  bool operator==(const Size2d& o) const { return h == o.h && w == o.w; }
};

// "3" or "3x1".
std::string size_str(Size2d s);
// 3 or [3, 1]: a spec's form.
nlohmann::json size_json(Size2d s);

}  // namespace minidl
