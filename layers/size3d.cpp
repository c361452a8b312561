#include "layers/size3d.h"

#include "core/error.h"

namespace minidl {

std::string size3d_str(Size3d s) { return s.cube() ? std::to_string(s.d) : str(s.d, "x", s.h, "x", s.w); }

nlohmann::json size3d_json(Size3d s) {
  if (s.cube()) return s.d;
  return nlohmann::json::array({s.d, s.h, s.w});
}

}  // namespace minidl
