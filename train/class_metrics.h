// Per-class results at the end of a run: the confusion matrix of the last evaluation (row: true
// class, column: predicted; Trainer::evaluate counts it from its own predictions) and each
// class's accuracy, for summary.json and the run log.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/tta.h"

namespace minidl {

class RunLog;

// {"classes": [...], "per_class_acc": [percent or null for a class without test images],
//  "confusion": [[...], ...]} from K x K row-major counts.
nlohmann::json class_metrics(const std::vector<std::string>& classes, const std::vector<int64_t>& confusion);

// One line for the log: every class's accuracy, or of more than 10 the 5 worst and the 5 best
// above 0%, and how many are at 0%. Names keep their UTF-8 text; control bytes in them are
// written as \xNN.
std::string class_metrics_line(const nlohmann::json& metrics);

// Adds class_metrics of `confusion` (an evaluation of `split`, "test" or "val", with `tta`) and
// "class_metrics_tta", "class_metrics_split" to `summary` and logs the line.
void add_class_metrics(nlohmann::json& summary, const std::vector<std::string>& classes,
                       const std::vector<int64_t>& confusion, TtaMode tta, const std::string& split, RunLog& log);

}  // namespace minidl
