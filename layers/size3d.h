// A (depth, height, width) triple of a 3-D window (kernel, stride, padding); one number means all
// three, as PyTorch's int-or-tuple arguments.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace minidl {

struct Size3d {
  int64_t d, h, w;
  Size3d() : Size3d(0) {}
  Size3d(int64_t v) : d(v), h(v), w(v) {}  // NOLINT(google-explicit-constructor): conv3d(x, w, b, 1, 1)
  Size3d(int64_t d_, int64_t h_, int64_t w_) : d(d_), h(h_), w(w_) {}
  bool cube() const { return d == h && h == w; }
  bool operator==(const Size3d& o) const { return d == o.d && h == o.h && w == o.w; }
  int64_t volume() const { return d * h * w; }
};

// "3" or "3x1x1".
std::string size3d_str(Size3d s);
// 3 or [3, 1, 1]: a spec's form.
nlohmann::json size3d_json(Size3d s);

}  // namespace minidl
