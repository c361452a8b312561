#include "train/class_metrics.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "train/run_log.h"

namespace minidl {

nlohmann::json class_metrics(const std::vector<std::string>& classes, const std::vector<int64_t>& confusion) {
  const size_t k = classes.size();
  MINIDL_CHECK(confusion.size() == k * k, "class metrics: ", confusion.size(), " confusion counts for ", k,
               " classes");
  nlohmann::json acc = nlohmann::json::array(), rows = nlohmann::json::array();
  for (size_t t = 0; t < k; ++t) {
    std::vector<int64_t> row(confusion.begin() + static_cast<int64_t>(t * k),
                             confusion.begin() + static_cast<int64_t>((t + 1) * k));
    int64_t total = 0;
    for (int64_t c : row) total += c;
    acc.push_back(total > 0 ? nlohmann::json(100.0 * static_cast<double>(row[t]) / static_cast<double>(total))
                            : nlohmann::json(nullptr));
    rows.push_back(row);
  }
  return {{"classes", classes}, {"per_class_acc", acc}, {"confusion", rows}};
}

namespace {

// A class name as the terminal and log.txt show it: its UTF-8 text, with control bytes (ESC,
// newlines: a folder's name may hold any) written as \xNN, as error messages write them.
std::string shown_name(const std::string& name) {
  std::string out;
  for (const char c : name) {
    const auto b = static_cast<unsigned char>(c);
    if (b < 0x20 || b == 0x7f) {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", b);
      out += hex;
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string class_metrics_line(const nlohmann::json& m) {
  std::vector<std::pair<double, std::string>> scored;
  for (size_t i = 0; i < m["classes"].size(); ++i)
    if (!m["per_class_acc"][i].is_null())
      scored.emplace_back(m["per_class_acc"][i].get<double>(), shown_name(m["classes"][i].get<std::string>()));
  auto item = [](const std::pair<double, std::string>& s) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), " %.1f%%", s.first);
    return s.second + buf;
  };
  std::string line;
  if (scored.size() <= 10) {
    for (const auto& s : scored) line += (line.empty() ? "" : ", ") + item(s);
    return line;
  }
  std::stable_sort(scored.begin(), scored.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  line = "worst: ";
  for (size_t i = 0; i < 5; ++i) line += (i ? ", " : "") + item(scored[i]);
  // A class at 0% is among the worst, never among the best: with most classes at 0% (an early
  // epoch, a collapsed model) the best list is shorter, or says that none is above 0%.
  size_t zero = 0;
  for (const auto& s : scored) zero += s.first > 0 ? 0 : 1;
  std::string best;
  for (size_t i = 0; i < 5 && i + zero < scored.size(); ++i)
    best += (i ? ", " : "") + item(scored[scored.size() - 1 - i]);
  line += "; best: " + (best.empty() ? std::string("none above 0%") : best);
  if (zero > 0) line += str("; ", zero, " of ", scored.size(), " classes at 0%");
  return line;
}

void add_class_metrics(nlohmann::json& summary, const std::vector<std::string>& classes,
                       const std::vector<int64_t>& confusion, TtaMode tta, const std::string& split, RunLog& log) {
  const nlohmann::json m = class_metrics(classes, confusion);
  for (const char* key : {"classes", "per_class_acc", "confusion"}) summary[key] = m[key];
  summary["class_metrics_tta"] = to_string(tta);
  summary["class_metrics_split"] = split;
  log.line(str("per-class ", split, " accuracy",
               tta == TtaMode::None ? std::string() : str(" (", to_string(tta), " TTA)"), ": ", class_metrics_line(m)));
}

}  // namespace minidl
