#include "core/run_context.h"

namespace minidl {

namespace {

RunContext& default_context() {
  thread_local RunContext context;
  return context;
}

// Null: the thread's default context.
thread_local RunContext* g_current = nullptr;

}  // namespace

RunContext& current_run_context() { return g_current ? *g_current : default_context(); }

RunContextScope::RunContextScope(RunContext& context) : previous_(g_current) { g_current = &context; }

RunContextScope::~RunContextScope() { g_current = previous_; }

}  // namespace minidl
