#include "layers/pool/pool_args.h"

#include "core/error.h"
#include "layers/registry.h"

namespace minidl {

std::vector<int64_t> pair_arg(LayerArgs& args, const std::string& key, int64_t fallback) {
  std::vector<int64_t> v = args.has(key) ? args.get_ints(key) : std::vector<int64_t>{fallback};
  MINIDL_CHECK(v.size() == 1 || v.size() == 2, args.key_path(key), ": expected an integer or a list of two, got ",
               v.size(), " values");
  if (v.size() == 1) v.push_back(v[0]);
  for (int64_t x : v)
    MINIDL_CHECK(x >= 0 && x <= kMaxWindow, args.key_path(key), ": must be in 0..", kMaxWindow, ", got ", x);
  return v;
}

nlohmann::json pair_json(int64_t a, int64_t b) { return a == b ? nlohmann::json(a) : nlohmann::json({a, b}); }

std::string pair_str(int64_t a, int64_t b) { return a == b ? str(a) : str("(", a, ", ", b, ")"); }

}  // namespace minidl
