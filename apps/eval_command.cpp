// `minidl eval`: a trained run's accuracy, top-5, per-class precision and recall and confusion
// matrix on a split of its data (a language model's loss and perplexity on its val.bin), printed
// and written as JSON (train/evaluate_run.h).
#include <iostream>
#include <memory>

#include "apps/commands.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "train/evaluate_run.h"
#include "train/trained_run.h"

namespace minidl {

namespace {

struct EvalOptions {
  std::string run_dir;
  std::string weights;
  std::string device;
  std::string data_dir;
  std::string split = "test";
  std::string tta;  // "": the run's eval.tta
  int64_t limit = 0;
  std::string output;  // "": RUN/eval.json
};

int eval_command(const EvalOptions& o) {
  TrainedRun run(o.run_dir, o.weights, o.device);
  MINIDL_CHECK(!run.language_model() || o.tta.empty() || o.tta == "none",
               "eval --tta: a language model's windows are evaluated as they are");
  std::string dir;
  const Dataset data = evaluation_data(run, o.data_dir,
                                       o.split == "train" ? Split::Train
                                       : o.split == "val" ? Split::Val
                                                          : Split::Test,
                                       o.limit, &dir);
  nlohmann::json m = run.language_model() ? evaluate_language_model(run, data) : evaluate_run(run, data, run.tta(o.tta));
  m["run"] = o.run_dir;
  m["weights"] = run.weights_file();
  m["split"] = o.split;
  m["data"] = dir;
  m["device"] = run.device().str();
  const std::string output = o.output.empty() ? o.run_dir + "/eval.json" : o.output;
  write_file_atomic(output, m.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n", "evaluation");
  std::cout << "minidl eval: " << o.run_dir << " (" << run.weights_file() << ") on " << run.device().str() << ", "
            << o.split << " split\n"
            << evaluation_text(m) << "wrote " << output << std::endl;
  return 0;
}

}  // namespace

Command add_eval_command(CLI::App& app) {
  auto o = std::make_shared<EvalOptions>();
  CLI::App* cmd = app.add_subcommand(
      "eval", "evaluate a trained run: accuracy, top-5, per-class precision and recall, confusion matrix");
  add_trained_run_options(cmd, o->run_dir, o->weights, o->device, o->tta);
  cmd->add_option("--data", o->data_dir, "another copy of the data in the run's layout (default: the run's data.dir)");
  cmd->add_option("--split", o->split, "which split to evaluate (val: the run's validation split)")
      ->capture_default_str()
      ->check(CLI::IsMember({"test", "val", "train"}));
  cmd->add_option("--limit", o->limit, "the first N images of the split (default: as the run evaluated)");
  cmd->add_option("--output", o->output, "the JSON file to write (default: RUN/eval.json)");
  return {cmd, [o] { return eval_command(*o); }};
}

}  // namespace minidl
