// A trained run's model, loaded for inference (`minidl predict`, `minidl eval`, `minidl generate`):
// the run folder's config.json (the resolved config it trained with), its weights
// (model.safetensors, the last epoch's, or another file of the run's model) and classes.json. The
// model runs in eval mode with the run's precision and layout and its images are prepared as its
// evaluation prepared them (the run's image size, fit and normalization), so the numbers are those
// training printed for the same weights and data. A language model's run (its first layer takes
// token ids) has no classes and no images: `model()` under `activation_dtype()` gives its logits.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "data/cifar10.h"
#include "data/options.h"
#include "data/tta.h"
#include "train/config.h"

namespace minidl {

class Module;

class TrainedRun {
 public:
  // `weights` "": the run's model.safetensors (the last epoch's), "best": its best.safetensors
  // (checkpoint.save_best), else a file; `device` "": the config's. Errors name the run folder and
  // the file that is missing or wrong.
  TrainedRun(const std::string& run_dir, const std::string& weights, const std::string& device);
  ~TrainedRun();

  const std::string& run_dir() const { return run_dir_; }
  const std::string& weights_file() const { return weights_; }
  const TrainConfig& config() const { return config_; }
  const DataOptions& data() const { return data_; }
  Device device() const { return device_; }
  // The class names (index = output), from classes.json ("0", "1", ... for a run without one).
  const std::vector<std::string>& classes() const { return classes_; }
  // A language model's run: its model takes int32 token ids (B, T) and gives (B, T, V) logits.
  bool language_model() const { return vocab_size_ > 0; }
  int64_t vocab_size() const { return vocab_size_; }  // V; 0 for an image model
  Module& model() { return *model_; }
  // The type the run's precision computes activations in (autocast's; Float32: none).
  DType activation_dtype() const { return activation_dtype_; }
  int64_t num_classes() const { return static_cast<int64_t>(classes_.size()); }
  // The test-time augmentation named ("none", "flip", ...), or the run's eval.tta for "".
  TtaMode tta(const std::string& name) const;
  // The side S of the square images the model takes (32 for CIFAR).
  int64_t image_size() const;

  // float32 logits for a batch of normalized float32 images on device(), the views of `tta`
  // summed with the run's eval.tta_weights (data/tta.h), as the run's evaluation computes them.
  Tensor logits(const Tensor& images, TtaMode tta);
  // The logits of every image of `images` (uint8 N x 3 x S x S, host), in batches of the
  // config's eval.batch_size, with selective TTA where the run's eval.tta_share is below 1 (the
  // views for its least confident images only, as its evaluation chose them): float32
  // (N, classes) on the host; with `plain`, the plain view's
  // too, from the same forward passes; with `loss`, the mean loss of the plain logits against the
  // labels (the run's label smoothing included), each batch's mean weighted by its size and summed
  // in batch order, as the run's evaluation sums it.
  std::vector<float> all_logits(const Dataset& images, TtaMode tta, std::vector<float>* plain = nullptr,
                                double* loss = nullptr);
  // The same with the views on every image, whatever eval.tta_share says (predictions), and the
  // sum of the views' weights (the logits' scale).
  std::vector<float> every_image_logits(const Dataset& images, TtaMode tta);
  double view_weight_sum(TtaMode tta) const;

 private:
  // An image method on a language model's run is an error naming the run and `minidl generate`.
  void require_images() const;
  Tensor forward(const Tensor& images);
  // `plain` (the plain view's logits) with the other views of `tta` added.
  Tensor with_views(const Tensor& images, const Tensor& plain, TtaMode tta);
  std::vector<float> logits_of(const Dataset& images, TtaMode tta, bool selective, std::vector<float>* plain,
                               double* loss);

  std::string run_dir_, weights_;
  TrainConfig config_;
  DataOptions data_;
  Device device_;
  DType activation_dtype_ = DType::Float32;
  std::shared_ptr<Module> model_;
  std::vector<std::string> classes_;
  int64_t vocab_size_ = 0;
};

}  // namespace minidl
