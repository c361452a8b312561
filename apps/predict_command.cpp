// `minidl predict`: a trained run's top classes for image files (train/predict.h).
#include <iostream>
#include <memory>

#include "apps/commands.h"
#include "train/predict.h"
#include "train/trained_run.h"

namespace minidl {

namespace {

struct PredictOptions {
  std::string run_dir;
  std::string weights;
  std::string device;
  std::string tta;  // "": the run's eval.tta
  int64_t top_k = 5;
  bool json = false;
  std::vector<std::string> images;
};

int predict_command(const PredictOptions& o) {
  TrainedRun run(o.run_dir, o.weights, o.device);
  const TtaMode tta = run.tta(o.tta);
  const std::vector<Prediction> predictions = predict_images(run, o.images, o.top_k, tta);
  if (o.json)
    std::cout << prediction_json(run, predictions).dump(2, ' ', false, nlohmann::json::error_handler_t::replace)
              << std::endl;
  else
    std::cout << prediction_lines(run, predictions) << std::flush;
  return 0;
}

}  // namespace

Command add_predict_command(CLI::App& app) {
  auto o = std::make_shared<PredictOptions>();
  CLI::App* cmd = app.add_subcommand("predict", "classify image files (JPEG or PNG, any size) with a trained run");
  add_trained_run_options(cmd, o->run_dir, o->weights, o->device, o->tta);
  cmd->add_option("images", o->images, "image files")->required();
  cmd->add_option("--top-k", o->top_k, "classes shown per image, most probable first")->capture_default_str();
  cmd->add_flag("--json", o->json, "print JSON: [{\"image\", \"top\": [{\"class\", \"index\", \"probability\"}]}]");
  return {cmd, [o] { return predict_command(*o); }};
}

}  // namespace minidl
