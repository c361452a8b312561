#include "core/settings.h"

#include "core/run_context.h"

namespace minidl {

const ComputeSettings& compute_settings() { return current_run_context().compute; }

void set_compute_settings(const ComputeSettings& settings) { current_run_context().compute = settings; }

}  // namespace minidl
