// Two profiles side by side (`minidl profile --compare A/profile.json B/profile.json`): each row
// of A beside the row of B with the same path (modules) or name (sections, "autograd", "other"),
// their times, the ratio B / A, and their % of the limit; then the total and the step. Rows only
// one side has are listed with "-" on the other. What a change did, one line per layer.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace minidl {

// The table for two parsed profile.json documents (profiling/profile_report.h); `a_label` and
// `b_label` head the columns' description. Times are GPU ms when both profiles have them, host
// ms otherwise. Errors name the label of a document that is not a minidl profile.
std::string format_profile_comparison(const nlohmann::json& a, const nlohmann::json& b, const std::string& a_label,
                                      const std::string& b_label);

// Reads both files (errors name the file that is missing or not JSON) and prints the table.
int profile_compare_command(const std::string& a_path, const std::string& b_path);

}  // namespace minidl
