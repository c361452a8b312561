#include "train/repro_command.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "train/trainer.h"
#include "core/error.h"
#include "core/json_limits.h"
#include "core/safetensors.h"

namespace minidl {

namespace fs = std::filesystem;

namespace {

// Runs `args` (args[0] is the program) as a child process and returns its exit code.
int run_child(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = fork();
  MINIDL_CHECK(pid >= 0, "repro: fork failed: ", std::strerror(errno));
  if (pid == 0) {
    execv(argv[0], argv.data());
    std::perror("repro: exec");
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::vector<std::pair<int64_t, std::string>> read_step_bits(const std::string& path) {
  std::ifstream in(path);
  MINIDL_CHECK(in.good(), "repro: cannot read ", path);
  std::vector<std::pair<int64_t, std::string>> out;
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    const std::string where = str("repro: ", path, " line ", n);
    const nlohmann::json j = parse_json_limited(line, where);
    MINIDL_CHECK(j.is_object() && j.contains("step") && j["step"].is_number_integer() && j.contains("loss_bits") &&
                     j["loss_bits"].is_string(),
                 where, ": expected {\"step\": N, \"loss_bits\": \"...\", ...}");
    out.push_back({j["step"].get<int64_t>(), j["loss_bits"].get<std::string>()});
  }
  return out;
}

}  // namespace

int repro_command(const ReproOptions& options) {
  MINIDL_CHECK(options.steps >= 0, "repro: --steps must be >= 0 (0: the whole config), got ", options.steps);
  const TrainConfig config = load_train_config(options.config_path, options.overrides, options.device, "");
  {
    std::vector<std::string> b = options.overrides;
    b.insert(b.end(), options.overrides_b.begin(), options.overrides_b.end());
    load_train_config(options.config_path, b, options.device, "");  // run B's config errors come now
  }
  const std::string out = options.output_dir.empty() ? config.output_dir + "-repro" : options.output_dir;
  const std::string self = fs::canonical("/proc/self/exe").string();
  std::string dirs[2] = {out + "/run_a", out + "/run_b"};
  for (int r = 0; r < 2; ++r) {
    // --overwrite replaces an earlier repro's run files and nothing else a user kept there.
    std::vector<std::string> args = {self, "train", "--config", options.config_path, "--output", dirs[r], "--overwrite"};
    for (const auto& o : options.overrides) args.insert(args.end(), {"--set", o});
    if (r == 1)
      for (const auto& o : options.overrides_b) args.insert(args.end(), {"--set", o});
    if (!options.device.empty()) args.insert(args.end(), {"--device", options.device});
    if (options.steps > 0) args.insert(args.end(), {"--max-steps", std::to_string(options.steps)});
    std::cout << "repro: run " << (r ? "B" : "A") << " -> " << dirs[r] << std::endl;
    const int rc = run_child(args);
    MINIDL_CHECK(rc == 0, "repro: run ", (r ? "B" : "A"), " failed with exit code ", rc);
  }

  const bool same = compare_runs(dirs[0], dirs[1], std::cout);
  std::cout << (same ? "repro: IDENTICAL" : "repro: NOT identical") << std::endl;
  return same ? 0 : 1;
}

bool compare_runs(const std::string& dir_a, const std::string& dir_b, std::ostream& out) {
  auto a = read_step_bits(dir_a + "/steps.jsonl"), b = read_step_bits(dir_b + "/steps.jsonl");
  bool same = a.size() == b.size();
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (a[i] != b[i]) {
      out << "repro: DIFFERENT loss at step " << a[i].first << ": bits " << a[i].second << " vs " << b[i].second
          << std::endl;
      same = false;
      break;
    }
  }
  if (a.size() != b.size())
    out << "repro: DIFFERENT number of steps: " << a.size() << " vs " << b.size() << std::endl;
  else if (same)
    out << "repro: all " << a.size() << " step losses are bit-identical" << std::endl;

  const std::string wa = dir_a + "/model.safetensors", wb = dir_b + "/model.safetensors";
  const std::string ha = safetensors_payload_sha256(wa), hb = safetensors_payload_sha256(wb);
  out << "repro: final weights sha256 A " << ha << "\n"
      << "repro: final weights sha256 B " << hb << std::endl;
  if (ha != hb) {
    same = false;
    SafeTensors ta = load_safetensors(wa), tb = load_safetensors(wb);
    for (size_t i = 0; i < std::min(ta.tensors.size(), tb.tensors.size()); ++i) {
      const Tensor &x = ta.tensors[i].second, &y = tb.tensors[i].second;
      if (ta.tensors[i].first != tb.tensors[i].first || x.nbytes() != y.nbytes() ||
          std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()) != 0) {
        out << "repro: first differing tensor: " << ta.tensors[i].first << std::endl;
        break;
      }
    }
  }
  return same;
}

}  // namespace minidl
