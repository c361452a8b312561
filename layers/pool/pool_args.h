// What the pooling layers' factories share: PyTorch's int-or-pair window arguments.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "layers/layer_descriptor.h"

namespace minidl {

// The key as (h, w): an int or a list of two, as PyTorch's _pair, each in 0..kMaxWindow; `fallback`
// for both when the key is absent.
std::vector<int64_t> pair_arg(LayerArgs& args, const std::string& key, int64_t fallback);

// (a, b) as the spec writes it back: one int when both are equal.
nlohmann::json pair_json(int64_t a, int64_t b);

// "2" or "(2, 3)", for describe().
std::string pair_str(int64_t a, int64_t b);

}  // namespace minidl
