// The libraries a minidl binary runs with, for `minidl --version`.
#pragma once
#include <string>

namespace minidl {

// The CUDA libraries minidl runs with and was built against ("CUDA runtime 12.4 (built with 12.4),
// driver 12.6, cuDNN 9.1.0 (built with 9.1.0)"), or "built without CUDA".
std::string cuda_versions();

}  // namespace minidl
