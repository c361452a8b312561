// `minidl repro`: trains the same config twice in separate processes and compares every step's
// loss bit for bit and the final weights' SHA-256. Exit 0 only when both match. --set-b changes
// run B only, for settings that promise the same bits (cuda_graph).
#pragma once
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace minidl {

struct ReproOptions {
  std::string config_path;
  std::vector<std::string> overrides;
  std::vector<std::string> overrides_b;  // applied to run B only, e.g. cuda_graph=false to compare
                                         // a graphed run with an eager one
  std::string device;
  int64_t steps = 0;       // 0: the whole config
  std::string output_dir;  // default: the config's output.dir + "-repro"
};

int repro_command(const ReproOptions& options);

// Compares two run folders: every step's loss bits (steps.jsonl) and the final weights
// (model.safetensors, SHA-256 of the payload). Prints what it finds to `out`, naming the first
// differing step and tensor; true only when both match.
bool compare_runs(const std::string& dir_a, const std::string& dir_b, std::ostream& out);

}  // namespace minidl
