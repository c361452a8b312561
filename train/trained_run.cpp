#include "train/trained_run.h"

#include <algorithm>
#include <filesystem>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/error.h"
#include "core/init.h"
#include "core/json_limits.h"
#include "core/safetensors.h"
#include "data/loader.h"
#include "layers/layer_descriptor.h"
#include "layers/loss/loss.h"
#include "layers/module.h"
#include "layers/registry.h"
#include "train/checkpoint.h"
#include "train/precision.h"
#include "train/trainer.h"

namespace minidl {

namespace fs = std::filesystem;

namespace {

// The class names the run recorded (train writes classes.json), one per output.
std::vector<std::string> read_classes(const std::string& run_dir, int64_t outputs) {
  const std::string file = (fs::path(run_dir) / "classes.json").string();
  std::vector<std::string> classes;
  if (!fs::exists(file)) {
    for (int64_t i = 0; i < outputs; ++i) classes.push_back(std::to_string(i));
    return classes;
  }
  const nlohmann::json j = parse_json_limited(read_file_limited(file, "class list"), file);
  MINIDL_CHECK(j.is_array(), "'", file, "': expected a list of class names, got ", json_excerpt(j));
  for (const auto& name : j) {
    MINIDL_CHECK(name.is_string(), "'", file, "': expected class names (strings), got ", json_excerpt(name));
    classes.push_back(name.get<std::string>());
  }
  MINIDL_CHECK(static_cast<int64_t>(classes.size()) == outputs, "'", file, "' names ", classes.size(),
               " classes, but the model gives ", outputs, " outputs");
  return classes;
}

// A language model: its first layer takes int32 token ids (an Embedding), not images.
bool takes_token_ids(Module& model) {
  Module* first = model.children().empty() ? &model : model.children().front().second.get();
  return first->descriptor() && first->descriptor()->ids_below > 0;
}

}  // namespace

TrainedRun::TrainedRun(const std::string& run_dir, const std::string& weights, const std::string& device)
    : run_dir_(run_dir) {
  std::error_code ec;
  MINIDL_CHECK(fs::is_directory(run_dir, ec), "--run '", text_excerpt(run_dir),
               "': ", fs::exists(run_dir, ec) ? "not a folder" : "no such folder");
  const std::string config_file = (fs::path(run_dir) / "config.json").string();
  MINIDL_CHECK(fs::exists(config_file, ec), "--run '", text_excerpt(run_dir),
               "': no config.json there (not a run folder)");
  // "best": the weights of the run's best epoch (checkpoint.save_best), as Lightning's ckpt_path="best".
  const bool best = weights == "best";
  weights_ = weights.empty() ? (fs::path(run_dir) / "model.safetensors").string()
             : best          ? (fs::path(run_dir) / "best.safetensors").string()
                             : weights;
  MINIDL_CHECK(
      fs::exists(weights_, ec),
      weights.empty()
          ? str("--run '", text_excerpt(run_dir), "': no model.safetensors there (the run has not finished an epoch)")
      : best ? str("--weights best: '", text_excerpt(run_dir), "' has no best.safetensors (the run did not set ",
                   "checkpoint.save_best, or has not finished an epoch)")
             : str("--weights '", text_excerpt(weights), "': no such file"));
  nlohmann::json j = read_json_file(config_file);
  // An edited config.json would run the weights with another model or normalization: checked
  // against the checkpoint's own record where the folder still has it (as export does).
  const std::string checkpoint = (fs::path(run_dir) / "checkpoint.safetensors").string();
  if (fs::exists(checkpoint, ec)) check_run_config(j, config_file, checkpoint);
  if (!device.empty()) j["device"] = device;
  try {
    config_ = parse_train_config(j);
  } catch (const Error& e) {
    fail(str("'", config_file, "': ", e.what()));
  }
  device_ = setup_compute(config_);
  data_ = DataOptions::from_json(config_.data, "data");
  // A segmentation's evaluation is its run's own: the test Dice of every epoch (metrics.jsonl,
  // summary.json); these commands take classifiers of images and language models.
  MINIDL_CHECK(data_.format != DataFormat::Volumes, "--run '", text_excerpt(run_dir),
               "' trained a segmentation of volumes (data.format \"volumes\"): its test Dice is in its ",
               "metrics.jsonl and summary.json; eval, predict and export take image classifiers and language models");
  activation_dtype_ = minidl::activation_dtype(*config_.precision);
  set_init_seed(config_.seed);
  model_ = build_model(config_, device_);
  const SafeTensors trained = load_safetensors(weights_);
  check_weights(trained, weights_);
  try {
    model_->load_state_dict(trained.tensors);
  } catch (const Error& e) {
    fail(str("'", weights_, "' does not hold this run's model (", config_file, "): ", e.what()));
  }
  model_->to(device_);
  model_->eval();
  if (takes_token_ids(*model_)) {
    autograd::NoGradGuard no_grad;
    const AutocastGuard autocast(activation_dtype_);
    const Tensor out = (*model_)(Tensor::zeros({1, 1}, DType::Int32, device_));
    MINIDL_CHECK(out.dim() == 3, "'", config_file, "': the model gives ", shape_str(out.shape()),
                 " for one token, not (1, 1, V) logits");
    vocab_size_ = out.size(2);
    return;
  }
  const int64_t s = image_size();
  const Tensor out = logits(Tensor::zeros({1, 3, s, s}, DType::Float32, device_), TtaMode::None);
  MINIDL_CHECK(out.dim() == 2, "'", config_file, "': the model gives ", shape_str(out.shape()),
               " for one image, not (1, classes) logits");
  classes_ = read_classes(run_dir, out.size(1));
}

TrainedRun::~TrainedRun() = default;

TtaMode TrainedRun::tta(const std::string& name) const {
  return name.empty() ? config_.tta : from_string<TtaMode>(name, "--tta");
}

void TrainedRun::require_images() const {
  MINIDL_CHECK(!language_model(), "--run '", text_excerpt(run_dir_),
               "' is a language model's run (its model takes token ids): minidl generate samples from it");
}

int64_t TrainedRun::image_size() const {
  require_images();
  return data_.format == DataFormat::ImageFolder ? data_.image_size : 32;
}

Tensor TrainedRun::forward(const Tensor& images) {
  const AutocastGuard autocast(activation_dtype_);
  return (*model_)(images.to(*config_.memory_format));
}

Tensor TrainedRun::logits(const Tensor& images, TtaMode tta) {
  require_images();
  autograd::NoGradGuard no_grad;
  const Tensor plain = forward(images).to(DType::Float32);
  return with_views(images, plain, tta);
}

Tensor TrainedRun::with_views(const Tensor& images, const Tensor& plain, TtaMode tta) {
  autograd::NoGradGuard no_grad;
  const std::vector<TtaView> views = tta_views(tta, config_.tta_weights);
  if (views.size() == 1) return plain;
  return tta_logits([this](const Tensor& x) { return forward(x); }, images, plain, views);
}

std::vector<float> TrainedRun::all_logits(const Dataset& images, TtaMode tta, std::vector<float>* plain, double* loss) {
  return logits_of(images, tta, tta != TtaMode::None && config_.tta_share < 1, plain, loss);
}

std::vector<float> TrainedRun::every_image_logits(const Dataset& images, TtaMode tta) {
  return logits_of(images, tta, false, nullptr, nullptr);
}

double TrainedRun::view_weight_sum(TtaMode tta) const {
  double sum = 0;
  for (const TtaView& v : tta_views(tta, config_.tta_weights)) sum += v.weight;
  return sum;
}

std::vector<float> TrainedRun::logits_of(const Dataset& images, TtaMode tta, bool selective, std::vector<float>* plain,
                                         double* loss) {
  Loader loader(images, LoaderOptions::evaluation(data_, config_.eval_batch_size), device_);
  loader.start_epoch(0);
  // Selective: the views go to the least confident images only, in a second pass over them (the
  // run's evaluation with eval.tta_share < 1).
  std::vector<float> out, first_pass;
  out.reserve(static_cast<size_t>(images.size() * num_classes()));
  double loss_sum = 0;
  Batch batch;
  while (loader.next(batch)) {
    const Tensor first = logits(batch.images, TtaMode::None);
    if (loss) {
      autograd::NoGradGuard no_grad;
      const float mean = cross_entropy(first, batch.labels, static_cast<float>(config_.label_smoothing)).item();
      loss_sum += static_cast<double>(mean) * static_cast<double>(batch.labels.numel());
    }
    const std::vector<float> p = first.to(Device::cpu()).to_vector();
    first_pass.insert(first_pass.end(), p.begin(), p.end());
    if (selective) continue;
    const std::vector<float> v = with_views(batch.images, first, tta).to(Device::cpu()).to_vector();
    out.insert(out.end(), v.begin(), v.end());
  }
  const int64_t n = images.size(), k = num_classes();
  if (selective) {
    out = first_pass;
    // floor, as the run's evaluation takes it.
    const auto count = static_cast<int64_t>(config_.tta_share * static_cast<double>(n));
    const std::vector<int32_t> chosen = count > 0 ? least_confident(first_pass, n, k, count) : std::vector<int32_t>();
    if (!chosen.empty()) loader.start_subset(chosen);
    size_t next = 0;
    while (!chosen.empty() && loader.next(batch)) {
      const std::vector<float> v =
          with_views(batch.images, logits(batch.images, TtaMode::None), tta).to(Device::cpu()).to_vector();
      for (int64_t r = 0; r < batch.images.size(0); ++r, ++next)
        std::copy_n(v.begin() + r * k, k, out.begin() + static_cast<int64_t>(chosen[next]) * k);
    }
  }
  if (plain) *plain = std::move(first_pass);
  if (loss) *loss = loss_sum / static_cast<double>(n);
  return out;
}

}  // namespace minidl
