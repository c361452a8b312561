#include "core/run_context.h"

namespace minidl {

namespace {

RunContext& default_context() {
  static RunContext context;
  return context;
}

// Null: the default context (a pointer to it here would depend on static initialization order).
RunContext* g_current = nullptr;

}  // namespace

RunContext& current_run_context() { return g_current ? *g_current : default_context(); }

RunContextScope::RunContextScope(RunContext& context) : previous_(g_current) { g_current = &context; }

RunContextScope::~RunContextScope() { g_current = previous_; }

}  // namespace minidl
