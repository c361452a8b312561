#include "apps/export_command.h"

#include <filesystem>
#include <iostream>
#include <memory>

#include "apps/commands.h"
#include "core/autograd.h"
#include "core/error.h"
#include "core/init.h"
#include "core/json_limits.h"
#include "core/safetensors.h"
#include "data/cifar10.h"
#include "data/datasets.h"
#include "data/loader.h"
#include "data/options.h"
#include "export/onnx_examples.h"
#include "export/onnx_export.h"
#include "layers/loss/loss.h"
#include "layers/registry.h"
#include "train/checkpoint.h"
#include "train/config.h"
#include "train/run_folder.h"
#include "train/trainer.h"

namespace minidl {

namespace fs = std::filesystem;

namespace {

// The first `limit` test images (all with 0) of the run's data: data.dir, --data-dir, or
// CIFAR10_DIR as training found it. Read before the ONNX file is written, so a missing folder
// leaves no file behind.
Dataset reference_images(const TrainConfig& config, const std::string& data_dir, int64_t limit) {
  DataOptions data = DataOptions::from_json(config.data, "data");
  if (!data_dir.empty()) data.dir = data_dir;
  try {
    data.dir = data_dir_for(data);
  } catch (const Error& e) {
    fail(str("export --logits: ", e.what(), ", or pass --data-dir DIR"));
  }
  Dataset test =
      data.format == DataFormat::Cifar10 ? load_cifar10(data.dir, Split::Test, limit) : load_dataset(data, Split::Test);
  if (limit > 0 && limit < test.size()) {
    const int64_t pixels = test.images.numel() / test.size();
    std::vector<uint8_t> px(test.images.data<uint8_t>(), test.images.data<uint8_t>() + limit * pixels);
    std::vector<int32_t> la(test.labels.data<int32_t>(), test.labels.data<int32_t>() + limit);
    test.images = Tensor::from_vector(px, {limit, test.images.size(1), test.images.size(2), test.images.size(3)});
    test.labels = Tensor::from_vector(la, {limit});
  }
  return test;
}

// minidl's eval-mode logits on `test`, saved with the images (as the model sees them: normalized)
// and the labels. Returns the accuracy in percent.
double write_reference(Module& model, const TrainConfig& config, const Dataset& test, Device device,
                       const std::string& path) {
  const DataOptions data = DataOptions::from_json(config.data, "data");
  Loader loader(test, LoaderOptions::evaluation(data, config.eval_batch_size), device);
  autograd::NoGradGuard no_grad;
  model.eval();
  std::vector<float> images, logits;
  std::vector<int32_t> labels;
  int64_t correct = 0, classes = 0;
  Shape image_shape;
  loader.start_epoch(0);
  Batch batch;
  while (loader.next(batch)) {
    const Tensor out = model(batch.images);
    correct += count_correct(out, batch.labels);
    classes = out.size(1);
    image_shape = batch.images.shape();
    const std::vector<float> im = batch.images.to_vector(), lo = out.to_vector();
    const std::vector<int32_t> la = batch.labels.values<int32_t>();
    images.insert(images.end(), im.begin(), im.end());
    logits.insert(logits.end(), lo.begin(), lo.end());
    labels.insert(labels.end(), la.begin(), la.end());
  }
  const int64_t n = static_cast<int64_t>(labels.size());
  const double acc = 100.0 * static_cast<double>(correct) / static_cast<double>(n);
  save_safetensors(path,
                   {{"images", Tensor::from_vector(images, {n, image_shape[1], image_shape[2], image_shape[3]})},
                    {"labels", Tensor::from_vector(labels, {n})},
                    {"logits", Tensor::from_vector(logits, {n, classes})}},
                   {{"device", device.str()}, {"accuracy", str(acc)}});
  return acc;
}

// The file `option` names is written anew (atomically): a path that exists must be a regular
// file the run does not own. A device (--logits /dev/null), a FIFO, a folder or a link would be
// replaced by a regular file, and a run file (--onnx RUN/checkpoint.safetensors) destroyed.
void check_output_file(const std::string& path, const char* option, const ExportOptions& options) {
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(path, ec);
  if (!fs::exists(st)) return;
  MINIDL_CHECK(fs::is_regular_file(st), "export ", option, " ", path, ": exists and is not a regular file (",
               fs::is_directory(st) ? "a folder"
               : fs::is_symlink(st) ? "a symbolic link"
                                    : "a device, FIFO or socket",
               "); export writes a new file there: choose another path");
  const auto same = [&](const std::string& other) { return !other.empty() && fs::equivalent(path, other, ec); };
  MINIDL_CHECK(!same(options.config_path), "export ", option, " ", path, ": is the --config file; choose another path");
  const fs::path parent = fs::path(path).parent_path().empty() ? fs::path(".") : fs::path(path).parent_path();
  MINIDL_CHECK(options.run_dir.empty() || !fs::equivalent(parent, options.run_dir, ec) ||
                   !is_run_file(fs::path(path).filename().string()),
               "export ", option, " ", path, ": is a file of the run ", options.run_dir,
               " (export writes beside the run's files, never over them); choose another name");
}

}  // namespace

int export_command(const ExportOptions& options) {
  if (!options.examples_dir.empty()) {
    MINIDL_CHECK(options.run_dir.empty() && options.config_path.empty() && options.onnx_path.empty() &&
                     options.logits_path.empty(),
                 "export: --examples DIR writes the layer examples alone (no --run, --config, --onnx or --logits)");
    const std::vector<std::string> stems = export_layer_examples(options.examples_dir);
    std::cout << "minidl export: wrote " << stems.size() << " layer examples (.onnx and .safetensors) to "
              << options.examples_dir << std::endl;
    return 0;
  }
  MINIDL_CHECK(options.run_dir.empty() != options.config_path.empty(),
               "export: pass exactly one of --run RUN_DIR (a trained run) or --config FILE (a fresh model)");
  MINIDL_CHECK(!options.onnx_path.empty(), "export: --onnx FILE is required");
  MINIDL_CHECK(options.overrides.empty() || !options.config_path.empty(),
               "export: --set goes with --config (a run's config is what it trained with)");
  check_output_file(options.onnx_path, "--onnx", options);
  if (!options.logits_path.empty()) {
    check_output_file(options.logits_path, "--logits", options);
    std::error_code ec;
    MINIDL_CHECK(
        options.logits_path != options.onnx_path && !fs::equivalent(options.logits_path, options.onnx_path, ec),
        "export: --onnx and --logits name the same file, ", options.onnx_path);
  }
  nlohmann::json j;
  std::string weights;
  SafeTensors trained;
  if (!options.run_dir.empty()) {
    const std::string config_file = options.run_dir + "/config.json";
    weights = options.run_dir + "/model.safetensors";
    MINIDL_CHECK(fs::exists(config_file), "export --run ", options.run_dir,
                 ": no config.json there (not a run folder)");
    MINIDL_CHECK(fs::exists(weights), "export --run ", options.run_dir,
                 ": no model.safetensors there (the run has not finished an epoch)");
    j = read_json_file(config_file);
    trained = load_safetensors(weights);
    check_weights(trained, weights);
    // A run folder copied without its checkpoint cannot be checked further.
    const std::string checkpoint = options.run_dir + "/checkpoint.safetensors";
    if (fs::exists(checkpoint)) check_run_config(j, config_file, checkpoint);
  } else {
    j = read_json_file(options.config_path);
    for (const std::string& o : options.overrides) apply_override(j, o);
  }
  if (!options.device.empty()) j["device"] = options.device;
  TrainConfig config = parse_train_config(j);
  const Device device = setup_compute(config);

  set_init_seed(config.seed);
  std::shared_ptr<Module> model = build_model(config, device);
  if (!weights.empty()) model->load_state_dict(trained.tensors);
  model->to(device);

  OnnxExportOptions onnx;
  const DataOptions data = DataOptions::from_json(config.data, "data");
  const int64_t side = data.format == DataFormat::ImageFolder ? data.image_size : 32;
  onnx.sample = {3, side, side};
  onnx.metadata = {
      {"minidl.source", weights.empty() ? str("config ", options.config_path, " (initialised, untrained)") : weights},
      {"minidl.input",
       str("float32 (batch, 3, ", side, ", ", side, "): RGB in [0, 1], minus mean, over std, per channel")},
      {"minidl.mean", nlohmann::json(data.normalize.mean).dump()},
      {"minidl.std", nlohmann::json(data.normalize.std).dump()},
      {"minidl.model", config.model.dump()}};
  // The class names a run recorded (train writes classes.json): output index i is classes[i].
  const std::string classes_file = options.run_dir + "/classes.json";
  if (!options.run_dir.empty() && fs::exists(classes_file))
    onnx.metadata["minidl.classes"] =
        parse_json_limited(read_file_limited(classes_file, "class list"), classes_file).dump();
  Dataset reference;
  if (!options.logits_path.empty()) {
    MINIDL_CHECK(options.limit >= 0, "export: --limit must be >= 0, got ", options.limit);
    reference = reference_images(config, options.data_dir, options.limit);
  }
  export_onnx(*model, options.onnx_path, onnx);
  std::cout << "minidl export: wrote " << options.onnx_path << " (" << fs::file_size(options.onnx_path)
            << " bytes, opset 17) from " << onnx.metadata["minidl.source"] << std::endl;
  if (!options.logits_path.empty()) {
    const double acc = write_reference(*model, config, reference, device, options.logits_path);
    std::cout << "minidl export: wrote " << options.logits_path << " (minidl's eval logits on " << device.str()
              << "): test accuracy " << acc << "%" << std::endl;
  }
  return 0;
}

Command add_export_command(CLI::App& app) {
  auto o = std::make_shared<ExportOptions>();
  CLI::App* cmd = app.add_subcommand("export", "write a trained run's model as ONNX (eval mode, opset 17)");
  cmd->add_option("--run", o->run_dir, "run folder: its config.json and model.safetensors");
  cmd->add_option("--config", o->config_path, "or a config: its model as initialised (untrained)");
  cmd->add_option("--set", o->overrides, "override a config value (with --config): key.path=value");
  cmd->add_option("--onnx", o->onnx_path, "the ONNX file to write");
  cmd->add_option("--logits", o->logits_path,
                  "also write minidl's eval logits on the test set (with images, labels) to this safetensors file");
  cmd->add_option("--limit", o->limit, "--logits on the first N test images (default: all)");
  cmd->add_option("--device", o->device, "device for --logits: cpu, cuda or auto (default: the config's)");
  cmd->add_option("--data-dir", o->data_dir, "CIFAR-10 folder for --logits (default: the config's data.dir)");
  cmd->add_option("--examples", o->examples_dir,
                  "instead: every layer type's examples as ONNX models, with minidl's outputs, into this folder");
  return {cmd, [o] { return export_command(*o); }};
}

}  // namespace minidl
