// What the pooling layers share: their (h, w) pairs as PyTorch's repr prints them.
#pragma once
#include <cstdint>
#include <string>

namespace minidl {

// "2" or "(2, 3)", for describe().
std::string pair_str(int64_t a, int64_t b);

}  // namespace minidl
