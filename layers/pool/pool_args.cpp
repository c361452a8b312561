#include "layers/pool/pool_args.h"

#include "core/error.h"

namespace minidl {

std::string pair_str(int64_t a, int64_t b) { return a == b ? str(a) : str("(", a, ", ", b, ")"); }

}  // namespace minidl
