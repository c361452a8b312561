// Trains a JSON config through minidl's Run, the library call behind `minidl train`: the run
// folder, checkpoints, evaluation and resume come with it.
//   run_config CONFIG RUN_DIR [key.path=value ...]
#include <cstdio>

#include "core/error.h"
#include "train/run.h"

int main(int argc, char** argv) {
  using namespace minidl;
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s CONFIG RUN_DIR [key.path=value ...]\n", argv[0]);
    return 2;
  }
  RunOptions options;
  options.config_path = argv[1];
  options.output_dir = argv[2];
  for (int i = 3; i < argc; ++i) options.overrides.push_back(argv[i]);
  try {
    Run run(options);
    const RunResult result = run.execute();
    std::printf("run_config: %lld steps, test accuracy %.2f%%, exit code %d\n", static_cast<long long>(result.steps),
                result.test_acc, result.exit_code);
    return result.exit_code;
  } catch (const Error& e) {
    std::fprintf(stderr, "run_config: error: %s\n", e.what());
    return 1;
  }
}
