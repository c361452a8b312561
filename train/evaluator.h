// Evaluation of a run's model on its held-out splits (test, and validation where the data has
// one): accuracy plain and with test-time augmentation, the mean loss, and the confusion counts
// per-class metrics are read from, in one pass over the split. The Trainer owns one; it shares the
// trainer's model, forward (autocast and layout), config and run context.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/run_context.h"
#include "core/tensor.h"
#include "data/cifar10.h"
#include "data/loader.h"
#include "data/options.h"
#include "data/tta.h"
#include "layers/module.h"
#include "train/config.h"
#include "train/step_graph.h"

namespace minidl {

class Evaluator {
 public:
  // What one evaluation gives: accuracy (percent), plain and with the TTA views (tta_acc < 0 when
  // tta is "none"), the mean loss of the plain logits (the training loss, label smoothing
  // included), and the confusion counts of the predictions the TTA makes (the plain ones without
  // TTA), K x K row-major (row: true class, column: predicted).
  struct Result {
    double acc = 0;
    double tta_acc = -1;
    double loss = 0;
    int64_t images = 0;
    std::vector<int64_t> confusion;  // none for tokens and volumes
    // Volumes: the mean Dice over the foreground classes (DiceScores::mean) and each class's Dice
    // (NaN where no voxel is labelled with it), over every voxel of the split; acc counts voxels.
    double dice = -1;
    std::vector<double> class_dice;
  };
  // Called after each batch is queued with the batches done and their total.
  using Progress = std::function<void(int64_t done, int64_t total)>;
  // The model's output for a batch of float32 images, as the run computes it.
  using Forward = std::function<Tensor(const Tensor&)>;

  // `model`, `config` and `context` must outlive the evaluator. `val_set` may be empty (no
  // validation split). num_classes is the model's output width, which the labels are checked
  // against.
  Evaluator(Module& model, Forward forward, const TrainConfig& config, const DataOptions& data, Device device,
            RunContext& context, int64_t num_classes, const Dataset& test_set, const Dataset& val_set);
  ~Evaluator();

  // One pass over the split in eval mode, without autograd, the model back in training mode after.
  // Full batches replay a CUDA graph as training steps do; the host waits for the GPU once, at the
  // end. With eval.tta_share below 1 the TTA is selective: one plain pass, then the least
  // confident images again with the views; eager, the host reading the plain logits in between.
  Result evaluate(TtaMode tta, Split split, const Progress& progress = {});
  bool has_validation() const { return val_.loader != nullptr; }

 private:
  // What one evaluation batch leaves on the device: each image's predicted class (plain, and with
  // TTA; tta_predicted is empty without) and the batch's mean loss; a volume batch its Dice counts
  // (layers/loss/dice.h) instead of predictions.
  struct Outputs {
    Tensor predicted, tta_predicted, loss, dice_counts;
  };
  // An evaluated split: its loader (the images in order), labels on the host, the graph of its full
  // batches (one per TTA mode: the forward passes it replays depend on it) with the outputs its
  // replays write, and pinned memory the host reads the predictions and losses from.
  struct EvalSplit {
    std::unique_ptr<Loader> loader;
    std::vector<int32_t> labels;  // one per output: per image, or per token of a token set's windows
    int64_t per_sample = 1;       // outputs per sample: 1, a token set's seq_len, a volume's voxels
    bool volumes = false;         // a segmentation split: Dice counts per batch, no predictions
    std::shared_ptr<void> dice_counts;  // volumes: int32 (batches, classes, 3)
    std::unique_ptr<StepGraph> graph;
    TtaMode graph_tta = TtaMode::None;
    Outputs graph_outputs;
    std::shared_ptr<void> predicted, tta_predicted, losses;
  };
  void make_split(EvalSplit& e, const Dataset& data);
  Outputs device_eval(TtaMode tta, const Loader& loader, bool volumes);
  // r's Dice scores and voxel accuracy from every batch's counts.
  void add_dice(Result& r, const int32_t* counts, int64_t batches, int64_t voxels) const;
  Result evaluate_selective(TtaMode tta, Split split, Loader& loader);
  // The views of `tta` weighted as the config's eval.tta_weights says.
  std::vector<TtaView> views(TtaMode tta) const { return tta_views(tta, config_.tta_weights); }
  // The batches' mean losses weighted by their sizes (all batch_size but the last), summed in batch
  // order, over the images.
  static double mean_loss(const float* batch_losses, int64_t batches, int64_t batch_size, int64_t images);

  Module& model_;
  Forward forward_;
  const TrainConfig& config_;
  DataOptions data_;
  Device device_;
  RunContext& context_;
  int64_t num_classes_;
  EvalSplit test_, val_;
};

}  // namespace minidl
