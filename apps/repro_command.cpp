// `minidl repro`: trains the same config twice in separate processes and compares every step's
// loss bit for bit and the final weights' SHA-256 (train/compare_runs.h). Exit 0 only when both
// match. --set-b changes run B only, for settings that promise the same bits (cuda_graph).
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "apps/commands.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/json_limits.h"
#include "train/compare_runs.h"
#include "train/run_folder.h"
#include "train/trainer.h"

namespace minidl {

namespace fs = std::filesystem;

namespace {

struct ReproOptions {
  std::string config_path;
  std::vector<std::string> overrides;
  std::vector<std::string> overrides_b;  // applied to run B only, e.g. cuda_graph=false to compare
                                         // a graphed run with an eager one
  std::string device;
  int64_t steps = 0;       // 0: the whole config
  std::string output_dir;  // default: the config's output.dir + "-repro"
};

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

// repro trains with --overwrite into OUT/run_a and OUT/run_b; OUT/repro.json, written before its
// first run, records that those runs are its own. A run there that repro did not make (a user's
// training run) would be replaced, so it is refused.
constexpr const char* kMarker = "repro.json";
constexpr const char* kMadeBy = "minidl repro";

bool made_by_repro(const std::string& out, const std::string& run) {
  const std::string path = out + "/" + kMarker;
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return false;
  nlohmann::json j;
  if (!try_parse_json_limited(read_file_limited(path, "repro record"), path, &j) || !j.is_object()) return false;
  if (j.value("made_by", "") != kMadeBy || !j.contains("runs") || !j["runs"].is_array()) return false;
  for (const auto& r : j["runs"])
    if (r == run) return true;
  return false;
}

void check_repro_folders(const std::string& out, const std::string (&runs)[2]) {
  for (const std::string& run : runs) {
    const std::string dir = out + "/" + run;
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) continue;
    bool holds_run = false;
    for (const auto& e : fs::directory_iterator(dir, ec)) holds_run |= is_run_file(e.path().filename().string());
    MINIDL_CHECK(!ec, "repro: cannot list '", dir, "': ", ec.message());
    MINIDL_CHECK(!holds_run || made_by_repro(out, run), "repro: '", dir, "' holds a run that repro did not make (no ",
                 out, "/", kMarker, " names it); repro would replace it: choose another --output");
  }
}

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
  const std::string runs[2] = {"run_a", "run_b"};
  const std::string dirs[2] = {out + "/run_a", out + "/run_b"};
  check_repro_folders(out, runs);
  create_run_folder(out);
  write_file_atomic(out + "/" + kMarker,
                    nlohmann::json{{"made_by", kMadeBy}, {"runs", {runs[0], runs[1]}}}.dump(2) + "\n", "repro record");
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

}  // namespace

Command add_repro_command(CLI::App& app) {
  auto o = std::make_shared<ReproOptions>();
  CLI::App* cmd = app.add_subcommand("repro", "train twice in separate processes and compare the bits");
  add_config_options(cmd, o->config_path, o->overrides, o->device)->required();
  cmd->add_option("--steps", o->steps, "steps per run (0: the whole config)");
  cmd->add_option("--set-b", o->overrides_b,
                  "override for run B only, e.g. cuda_graph=false: graphed A against eager B (repeatable)");
  cmd->add_option("--output", o->output_dir, "folder for the two runs");
  return {cmd, [o] { return repro_command(*o); }};
}

}  // namespace minidl
