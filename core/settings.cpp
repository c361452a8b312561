#include "core/settings.h"

namespace minidl {

namespace {
ComputeSettings& settings_storage() {
  static ComputeSettings s;
  return s;
}
}  // namespace

const ComputeSettings& compute_settings() { return settings_storage(); }

void set_compute_settings(const ComputeSettings& settings) { settings_storage() = settings; }

}  // namespace minidl
