#include "profiling/profile_compare.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <vector>

#include "core/error.h"
#include "core/json_limits.h"

namespace minidl {

namespace {

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string pad_left(const std::string& s, size_t width) {
  return s.size() >= width ? s : std::string(width - s.size(), ' ') + s;
}

std::string pad_right(const std::string& s, size_t width) {
  return s.size() >= width ? s : s + std::string(width - s.size(), ' ');
}

// Modules match by path (a changed describe(), e.g. another dtype or fused ReLU, still matches);
// the other rows by name.
std::string row_key(const nlohmann::json& row) {
  const std::string kind = row.value("kind", "");
  return kind == "module" ? "module:" + row.value("path", "") : kind + ":" + row.value("name", "");
}

void check_profile(const nlohmann::json& j, const std::string& label) {
  MINIDL_CHECK(j.is_object() && j.contains("rows") && j["rows"].is_array() && j.contains("total") &&
                   j.contains("step"),
               "profile --compare: ", label, " is not a minidl profile.json (no \"rows\", \"total\" and \"step\")");
}

double row_ms(const nlohmann::json& row, bool gpu) {
  return gpu ? row.value("fwd_gpu_ms", 0.0) + row.value("bwd_gpu_ms", 0.0)
             : row.value("fwd_host_ms", 0.0) + row.value("bwd_host_ms", 0.0);
}

// The row's % of the limit over both passes: the time the limits allow over the time taken.
std::string limit_cell(const nlohmann::json& row) {
  if (!row.contains("work") || !row["work"].is_object()) return "-";
  double allowed = 0, taken = 0;
  for (const char* pass : {"fwd", "bwd"}) {
    const nlohmann::json& p = row["work"][pass];
    if (!p.contains("fraction_of_limit")) continue;
    const double ms = p.value("ms", 0.0);
    allowed += p.value("fraction_of_limit", 0.0) * ms;
    taken += ms;
  }
  return taken > 0 ? fixed(100.0 * allowed / taken, 1) + "%" : "-";
}

std::string ratio(double a, double b) { return a > 0 && b >= 0 ? fixed(b / a, 2) + "x" : "-"; }

struct Line {
  std::string name;
  const nlohmann::json* a = nullptr;
  const nlohmann::json* b = nullptr;
};

}  // namespace

std::string format_profile_comparison(const nlohmann::json& a, const nlohmann::json& b, const std::string& a_label,
                                      const std::string& b_label) {
  check_profile(a, a_label);
  check_profile(b, b_label);
  const bool gpu = a["step"].contains("gpu_ms") && b["step"].contains("gpu_ms");

  // A's rows in A's order, then the rows only B has, in B's order.
  std::vector<Line> lines;
  std::map<std::string, size_t> index;
  for (const nlohmann::json& row : a["rows"]) {
    const std::string key = row_key(row);
    if (index.count(key)) continue;
    index[key] = lines.size();
    lines.push_back({std::string(2 * static_cast<size_t>(row.value("depth", 0)), ' ') + row.value("name", ""), &row});
  }
  for (const nlohmann::json& row : b["rows"]) {
    const std::string key = row_key(row);
    auto it = index.find(key);
    if (it != index.end()) {
      if (!lines[it->second].b) lines[it->second].b = &row;
      continue;
    }
    index[key] = lines.size();
    lines.push_back({std::string(2 * static_cast<size_t>(row.value("depth", 0)), ' ') + row.value("name", ""),
                     nullptr, &row});
  }
  lines.push_back({"total", &a["total"], &b["total"]});

  size_t name_width = 6;
  for (const Line& l : lines) name_width = std::max(name_width, l.name.size());
  name_width = std::min<size_t>(name_width, 60) + 2;

  const char* unit = gpu ? "GPU" : "host";
  std::string s = str("A: ", a_label, " (", a.value("device", "?"), ", ", a.value("compute_dtype", "?"), ")\n",
                      "B: ", b_label, " (", b.value("device", "?"), ", ", b.value("compute_dtype", "?"), ")\n",
                      "ms per step of each row's own ", unit, " time, B/A, and each row's % of its device's limit\n");
  const std::string header = pad_right("row", name_width) + pad_left(str("A ", unit, " ms"), 12) +
                             pad_left(str("B ", unit, " ms"), 12) + pad_left("B/A", 8) + pad_left("A %lim", 8) +
                             pad_left("B %lim", 8);
  s += header + "\n" + std::string(header.size(), '-') + "\n";
  for (size_t i = 0; i < lines.size(); ++i) {
    const Line& l = lines[i];
    if (i + 1 == lines.size()) s += std::string(header.size(), '-') + "\n";
    std::string name = l.name.size() > name_width - 2 ? l.name.substr(0, name_width - 3) + "~" : l.name;
    std::string line = pad_right(name, name_width);
    const double ams = l.a ? row_ms(*l.a, gpu) : 0, bms = l.b ? row_ms(*l.b, gpu) : 0;
    line += pad_left(l.a ? fixed(ams, 3) : "-", 12) + pad_left(l.b ? fixed(bms, 3) : "-", 12);
    line += pad_left(l.a && l.b ? ratio(ams, bms) : "-", 8);
    line += pad_left(l.a ? limit_cell(*l.a) : "-", 8) + pad_left(l.b ? limit_cell(*l.b) : "-", 8);
    s += line + "\n";
  }
  const nlohmann::json &sa = a["step"], &sb = b["step"];
  auto step_line = [&](const char* what, const char* key) {
    if (!sa.contains(key) || !sb.contains(key) || !sa[key].is_number() || !sb[key].is_number()) return;
    const double x = sa[key].get<double>(), y = sb[key].get<double>();
    s += str(pad_right(what, name_width), pad_left(fixed(x, 3), 12), pad_left(fixed(y, 3), 12),
             pad_left(ratio(x, y), 8), "\n");
  };
  step_line("step GPU", "gpu_ms");
  step_line("step wall", "wall_ms");
  step_line("unprofiled wall", "unprofiled_wall_ms");
  step_line("graphed wall", "graphed_wall_ms");
  const auto peak = [](const nlohmann::json& j) {
    return j.contains("memory") ? j["memory"].value("step_peak_bytes", 0.0) / 1e6 : 0.0;
  };
  if (peak(a) > 0 && peak(b) > 0)
    s += str(pad_right("peak MB", name_width), pad_left(fixed(peak(a), 1), 12), pad_left(fixed(peak(b), 1), 12),
             pad_left(ratio(peak(a), peak(b)), 8), "\n");
  return s;
}

int profile_compare_command(const std::string& a_path, const std::string& b_path) {
  auto load = [](const std::string& path) {
    nlohmann::json j;
    const std::string text = read_file_limited(path, "profile --compare: profile", size_t{1} << 30);
    MINIDL_CHECK(try_parse_json_limited(text, path, &j) && j.is_object(), "profile --compare: '", path,
                 "' is not a profile.json (not a JSON object)");
    return j;
  };
  const nlohmann::json a = load(a_path);
  const nlohmann::json b = load(b_path);
  std::string table;
  try {
    table = format_profile_comparison(a, b, a_path, b_path);
  } catch (const nlohmann::json::exception& e) {
    fail(str("profile --compare: '", a_path, "' and '", b_path, "' are not both profile.json files of minidl profile (",
             text_excerpt(e.what()), ")"));
  }
  std::cout << table << std::flush;
  return 0;
}

}  // namespace minidl
