#include "layers/size2d.h"

#include "core/error.h"

namespace minidl {

std::string size_str(Size2d s) { return s.square() ? std::to_string(s.h) : str(s.h, "x", s.w); }

nlohmann::json size_json(Size2d s) {
  if (s.square()) return s.h;
  return nlohmann::json::array({s.h, s.w});
}

}  // namespace minidl
