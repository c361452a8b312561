// Learning-rate schedules as factors of the optimizer's lr, functions of the fractional epoch
// e = step / steps_per_epoch (so they change every step, as in the DAWNBench and airbench
// recipes) or of the fraction of the run t = step / total_steps. Each type is one
// ScheduleDescriptor (its name, the config's "type"; its keys; its factory) in the table
// schedule_types(), which make_schedule, the run config's "schedule" section and docs/config.md
// read:
//   constant                                    1
//   step         {"step_size": 8, "gamma": 0.1} gamma ^ floor(floor(e) / step_size) (StepLR per epoch)
//   cosine       {"min_factor": 0}              min + (1 - min) (1 + cos(pi t)) / 2
//   warmup       {"warmup_epochs": 2, "decay": "linear"|"cosine"}
//                                               e / warmup_epochs, then 1 -> 0 over the rest
//                {"warmup_fraction": 0.1, ...}  the same with the warm-up a fraction of the run
//   piecewise_linear {"epochs": [0, 5, 24], "factors": [0, 1, 0]}
//                                               linear between the points, flat outside (np.interp)
//                    {"fractions": [0, 0.23, 1], "factors": [0.2, 1, 0.07]}
//                                               the same with points in t (airbench's triangle)
//                    {"steps": [0, 7], "factors": [1, 0]}
//                                               the same with points in global steps
// A schedule in fractions of the run stretches with it (--set epochs=N); one in epochs or steps
// that ends before the run does is reported by check_length (the run logs it as a warning).
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/fields.h"
#include "core/json_args.h"

namespace minidl {

class LrSchedule {
 public:
  virtual ~LrSchedule() = default;
  // The factor the optimizer's base lr is multiplied by at global step `step` (0-based) of
  // `total_steps`, with `steps_per_epoch` (so schedules can be written in epochs).
  virtual double factor(int64_t step, int64_t steps_per_epoch, int64_t total_steps) const = 0;
  // {"type": ..., every key of the schedule}: what builds it again.
  virtual nlohmann::json to_json() const = 0;
  // Why the schedule, written in epochs or steps, does not fit a run of `total_steps` (it ends
  // before the run does, so the steps after it keep its last factor, or its warm-up outlasts the
  // run), with the fix; "" when it fits. Schedules in fractions of the run always fit.
  virtual std::string check_length(int64_t steps_per_epoch, int64_t total_steps) const = 0;
};

struct ScheduleDescriptor {
  std::string name;               // the config's "type": "cosine"
  std::string summary;            // the factor it computes
  std::vector<FieldInfo> fields;  // its keys besides "type"
  // Reads the keys after "type" (finishing `args`) and builds the schedule.
  std::unique_ptr<LrSchedule> (*make)(JsonArgs& args);
};

// Every schedule type, in docs/config.md's order.
const std::vector<const ScheduleDescriptor*>& schedule_types();

// Builds the schedule `config` names by its "type" (default "constant") from its object at
// `path`; unknown keys, a type outside the table and values out of range are errors naming the key.
std::unique_ptr<LrSchedule> make_schedule(const nlohmann::json& config, const std::string& path);

}  // namespace minidl
