// The JSON lines of a run's metrics.jsonl / steps.jsonl, for the tests that read them back.
#pragma once
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace minidl::test {

inline std::vector<nlohmann::json> read_json_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

}  // namespace minidl::test
