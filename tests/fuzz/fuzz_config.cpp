// Fuzzes the config reader: the bytes are a config file, optionally followed by a line
// "\n--set key.path=value" applied to it, then parsed and checked the way `minidl train` does
// (run config, data options, LR schedule). Any outcome but success or a minidl::Error (a crash,
// a sanitizer report, another exception escaping) is a bug.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "core/json_limits.h"
#include "data/options.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "train/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace minidl;
  std::string text(reinterpret_cast<const char*>(data), size), assignment;
  const size_t cut = text.find("\n--set ");
  if (cut != std::string::npos) {
    assignment = text.substr(cut + 7);
    text.resize(cut);
  }
  try {
    nlohmann::json j = parse_json_limited(text, "fuzz config");
    if (!j.is_object()) return 0;
    if (!assignment.empty()) apply_override(j, assignment);
    const TrainConfig c = parse_train_config(j);
    (void)DataOptions::from_json(c.data, "data");
    (void)make_schedule(c.schedule, "schedule");
    (void)c.to_json().dump();
  } catch (const Error&) {
  }
  return 0;
}
