#include "core/autocast.h"

#include "core/error.h"

namespace minidl {

namespace {
thread_local DType g_autocast = DType::Float32;
}  // namespace

DType autocast_dtype() { return g_autocast; }

AutocastGuard::AutocastGuard(DType dtype) : previous_(g_autocast) {
  MINIDL_CHECK(dtype == DType::Float32 || is_half(dtype), "autocast: expected bfloat16, float16 or float32, got ",
               dtype_name(dtype));
  g_autocast = dtype;
}

AutocastGuard::~AutocastGuard() { g_autocast = previous_; }

}  // namespace minidl
