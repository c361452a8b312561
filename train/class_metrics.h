// Per-class results at the end of a run: the test set's confusion matrix (row: true class,
// column: predicted) and each class's accuracy, for summary.json and the run log.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/tta.h"

namespace minidl {

class RunLog;
class Trainer;

// {"classes": [...], "per_class_acc": [percent or null for a class without test images],
//  "confusion": [[...], ...]} from K x K row-major counts.
nlohmann::json class_metrics(const std::vector<std::string>& classes, const std::vector<int64_t>& confusion);

// One line for the log: every class's accuracy, or the 5 worst and 5 best of more than 10. Names
// keep their UTF-8 text; control bytes in them are written as \xNN.
std::string class_metrics_line(const nlohmann::json& metrics);

// Runs the trainer's confusion pass with `tta`, adds class_metrics (and "class_metrics_tta") to
// `summary` and logs the line.
void add_class_metrics(nlohmann::json& summary, Trainer& trainer, TtaMode tta, RunLog& log);

}  // namespace minidl
