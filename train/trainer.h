// The training loop: builds model, optimizer, schedule and data from a TrainConfig, runs epochs
// of steps (forward, loss, backward, update), evaluates, logs metrics, writes checkpoints and
// resumes from them bit for bit.
#pragma once
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/run_context.h"
#include "core/tensor.h"
#include "data/cifar10.h"
#include "data/loader.h"
#include "data/options.h"
#include "data/tta.h"
#include "layers/module.h"
#include "layers/regularization/dropout_state.h"
#include "optim/grad_clip.h"
#include "optim/grad_scaler.h"
#include "optim/lookahead.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "train/config.h"
#include "train/data_parallel.h"
#include "train/evaluator.h"
#include "train/param_rules.h"
#include "train/step_graph.h"

namespace minidl {

class Communicator;  // distributed/communicator.h
class StepObserver;

// A trainer owns its run's context (core/run_context.h: the config's compute switches and init
// seed) and its model's dropout state (the config's seed and the step, which the model's modules
// hold). Every call below that builds or runs anything makes the context current for its
// duration, so trainers alive at once, used in turn, each compute as if alone.
class Trainer {
 public:
  // Where the model's first weights come from: the config (the seed, the "init" rules, then
  // "init_from"), or a checkpoint loaded over them right after (a resumed run, which reads no
  // init_from file).
  enum class Weights { FromConfig, FromCheckpoint };
  // Reads the data set from data.dir (or CIFAR10_DIR). An "auto" precision or memory_format is
  // resolved for `device` (resolve_for_device); config() and resolved_config() hold the choice.
  Trainer(const TrainConfig& config, Device device, Weights weights = Weights::FromConfig);
  ~Trainer();
  // Its evaluator holds the trainer's forward, config and context: a trainer stays where it is made.
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;
  // Uses data sets already loaded (on the host or on `device`): the benchmark loads them once.
  // data.val_fraction holds the validation split out of `train_set`; else `val_set` (an image
  // folder's val/; empty: none) is it.
  Trainer(const TrainConfig& config, Device device, Dataset train_set, Dataset test_set, Dataset val_set = Dataset(),
          Weights weights = Weights::FromConfig);

  // What the host reads of one training step once the GPU is done with it (after
  // synchronize(device())): its loss and how many of its images the model classified correctly.
  struct StepRecord {
    float loss;
    int32_t correct;
  };
  // One training step at global step `step`: the next batch of train_loader() (false, and nothing
  // done, when the epoch has none left), the schedule's lr, forward, loss, backward, update.
  // Nothing waits for the GPU: the step's record is queued into *record, which must be pinned
  // host memory (allocate_pinned) read after a synchronize. With cuda_graph on a GPU, the device
  // work of steps after the warm-up is one CUDA graph replay; the bits are those of the eager step.
  // With an observer (a profiler, train/step_observer.h) the step runs eagerly (per-layer times
  // need the layers' boundaries), and the loss, update and data are sections of their own.
  bool train_step(int64_t step, StepRecord* record, StepObserver* observer = nullptr);
  // The learning rate of the default group at `step` (base lr times the schedule).
  double lr_at(int64_t step) const;
  // Why the schedule does not fit this run's length, with the fix (LrSchedule::check_length); ""
  // when it does.
  std::string schedule_warning() const { return schedule_->check_length(steps_per_epoch(), total_steps()); }
  // One pass over the test split (or the validation split) in eval mode (train/evaluator.h):
  // accuracy plain and with the TTA views, mean loss, confusion counts.
  using EvalResult = Evaluator::Result;
  using EvalProgress = Evaluator::Progress;
  EvalResult evaluate(TtaMode tta, Split split = Split::Test, const EvalProgress& progress = {});
  // Whether the data has a validation split (data.val_fraction, or an image folder's val/), which
  // evaluate(tta, Split::Val) reads.
  bool has_validation() const { return val_set_.size() > 0; }
  // What init_from loaded, and the run log's lines on it (none without init_from or from a checkpoint).
  const std::vector<std::string>& init_from_lines() const { return init_from_lines_; }
  // The class names of the data (index = label), and the data's notes for the run log.
  const std::vector<std::string>& classes() const { return classes_; }
  int64_t num_classes() const { return static_cast<int64_t>(classes_.size()); }
  // Values per sample (a token set's: per token) the model gives: the classes, or the vocabulary.
  // Predictions per sample: 1 per image, seq_len per window of a token set.
  int64_t outputs_per_sample() const { return train_set_.outputs_per_sample(); }
  SampleKind sample_kind() const { return train_set_.kind; }
  int64_t output_width() const { return train_set_.is_tokens() ? output_width_ : num_classes(); }
  int64_t test_size() const { return test_set_.size(); }  // images evaluate() classifies
  int64_t train_size() const { return train_set_.size(); }
  int64_t val_size() const { return val_set_.size(); }
  // Where the splits came from, and what "auto" normalization computed, for the run log.
  std::vector<std::string> data_notes() const;
  // dataset_crc32 of the training set (data/datasets.h), computed on first use: what the ranks of
  // a job compare and a checkpoint records, so no run goes on with other data silently.
  uint32_t training_data_crc32() const;
  // How the training step runs now: "CUDA graph" (with how many kinds of step when several are
  // captured), "eager", or why a capture failed.
  std::string step_mode() const;
  // True when every kind of step run so far replays a CUDA graph (none failed, some captured).
  bool steps_graphed() const;
  // On a GPU, whether later steps (without a profiler) may run as CUDA graphs; the config's
  // cuda_graph at first. minidl profile times eager steps with it off, then graphed ones.
  void set_cuda_graphs(bool on) { cuda_graphs_ = on && device_.is_cuda(); }
  // The dtype of the activations: float32, or the config's bf16/fp16 (train/precision.h).
  DType activation_dtype() const { return activation_dtype_; }
  // The layout of the activations: NCHW, or the config's channels_last.
  MemoryFormat activation_format() const { return activation_format_; }
  // The loss scaler of a float16 run (null otherwise).
  GradScaler* grad_scaler() { return grad_scaler_.get(); }
  // The scaler's state for a checkpoint (null without one), and its restore: a float16 run needs
  // the state its checkpoint (`where`) holds, any other run none.
  nlohmann::json grad_scaler_state() const;
  void load_grad_scaler_state(const nlohmann::json& state, const std::string& where);

  // The ranks this trainer is one of (a world of one until set; train/data_parallel.h). Errors
  // when the batch does not split evenly; graphs captured before (of the old ranks) are dropped.
  void set_communicator(std::shared_ptr<Communicator> comm);
  // The data-parallel half of the run: the communicator, micro-batches, gradient buckets and
  // the reduction's timing and overlap.
  DataParallel& data_parallel() { return data_parallel_; }
  const DataParallel& data_parallel() const { return data_parallel_; }

  Module& model() { return *model_; }
  Optimizer& optimizer() { return *optimizer_; }
  Loader& train_loader() { return *train_loader_; }
  int64_t steps_per_epoch() const { return train_loader_->batches_per_epoch(); }
  // ceil(epochs * steps per epoch): a fractional last epoch (9.9) stops part-way through.
  int64_t total_steps() const { return total_steps_; }
  const TrainConfig& config() const { return config_; }
  Device device() const { return device_; }
  // The run's context: a caller that runs model() itself installs it (RunContextScope) to compute
  // with the run's settings.
  RunContext& run_context() { return context_; }
  // The config with every component's own resolved view (what config.json holds).
  nlohmann::json resolved_config() const;

 private:
  TrainConfig config_;
  RunContext context_;
  // The seed and step of the model's dropout draws, handed to its modules once at build.
  std::shared_ptr<DropoutState> dropout_state_;
  Device device_;
  DataOptions data_options_;
  std::shared_ptr<Module> model_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<LrSchedule> schedule_;
  FreezeRules freeze_;
  const Lookahead* lookahead_ = nullptr;  // inside optimizer_, when the config has "lookahead"
  Dataset train_set_, test_set_, val_set_;
  mutable std::optional<uint32_t> train_set_crc32_;
  std::string normalization_note_;    // what data.mean/std "auto" computed (empty: not asked)
  std::vector<std::string> classes_;  // the data's names, or "0" .. for data sets without names; none for tokens
  int64_t output_width_ = 0;          // a language model's vocabulary
  std::vector<std::string> init_from_lines_;
  std::unique_ptr<Loader> train_loader_;
  std::unique_ptr<Evaluator> evaluator_;  // the test and validation splits
  int64_t total_steps_ = 0;
  DType activation_dtype_ = DType::Float32;
  MemoryFormat activation_format_ = MemoryFormat::Contiguous;  // the config's memory_format
  std::unique_ptr<GradScaler> grad_scaler_;
  std::unique_ptr<GradClipper> grad_clipper_;  // with the config's grad_clip
  std::vector<Tensor> parameters_;  // the model's parameters, whose gradients the scaler unscales
  DataParallel data_parallel_;

  // The device half of a training step (everything after the uploads), and of an evaluation
  // batch; what a CUDA graph captures. A step's results: its loss and correct count, on the device.
  struct StepResults {
    Tensor loss, correct;
  };
  StepResults device_step(bool prepared, double lr, StepObserver* observer);
  // Backward from the loss and the update: plain, or, with a loss scaler, from the scaled loss and
  // skipped when the unscaled gradients hold an inf or NaN; gradients clipped (after unscaling)
  // with grad_clip.
  void backward_and_update(const Tensor& loss, bool prepared, double lr, StepObserver* observer);
  void backward(const Tensor& loss);
  void update(bool prepared, double lr, StepObserver* observer);
  // The device half of a step of several micro-batches (micro_batches() > 1): DataParallel::step,
  // then the update. A CUDA graph captures it, collectives included, as it captures device_step.
  StepResults data_parallel_step(int64_t step, bool prepared, double lr);
  // Whether a graph of `step`'s freeze phase is captured.
  bool phase_graphed(int64_t step) const;
  // The model's output for a batch of float32 images, under autocast in the activation dtype
  // (core/autocast.h; none for fp32).
  Tensor forward(const Tensor& images);
  // Errors unless the model takes the data's images and gives one value per class.
  void check_class_count();
  void check_vocabulary();  // a token set: (N, T, V) logits, every token id below V
  void check_segmentation();  // a volume set: (N, classes, D, H, W) logits
  // The training step as CUDA graphs, one per kind of step (step_kind): steps differ in their
  // device work where lookahead averages, once a freeze rule has switched a parameter off, and
  // where the benchmark reduces a data-parallel step's buckets after backward.
  // The kinds share one memory pool, as they never run at the same time; each keeps the result
  // tensors of its capture, which its replays write. When the freeze phase changes, the graphs of
  // other phases are dropped: they point at gradients the freeze rules have just released.
  int step_kind(int64_t step) const;
  StepGraph& train_graph(int kind);
  int captured_graphs() const;
  const StepGraph* failed_graph() const;  // a kind whose capture failed, or null
  bool cuda_graphs_;
  std::shared_ptr<GraphMemoryPool> train_graph_pool_;  // made with the first graph
  std::map<int, StepGraph> train_graphs_;
  std::map<int, StepResults> step_results_;
};

// The data folder a run reads: data.dir, or for CIFAR-10 with data.dir empty, $CIFAR10_DIR (an
// error when neither is set).
std::string data_dir_for(const DataOptions& data);

// The config's model (model.layers) built on `device`, its module paths assigned, and the config's
// "norm_single_read": false set on every normalization layer (layers/norm/norm_path.h).
std::shared_ptr<Module> build_model(const TrainConfig& config, Device device);

// Loads the training and test sets a config names (data.format, data.dir or CIFAR10_DIR, data.train_limit).
std::pair<Dataset, Dataset> load_datasets(const TrainConfig& config);

// Loads a config file, applies overrides and command-line device/output, and parses it; the
// overridden tree is depth-checked (core/json_limits.h) before anything copies it.
TrainConfig load_train_config(const std::string& path, const std::vector<std::string>& overrides,
                              const std::string& device, const std::string& output_dir);

// Sets the default run context's compute switches from the config (for what a command runs
// outside its Trainer, which computes in a context of its own), picks the device and resolves the
// config's "auto" precision and memory_format for it (resolve_for_device).
Device setup_compute(TrainConfig& config);

// A config file ready to run: load_train_config, then setup_compute. What the commands that run a
// config start with (a rank of several picks its GPU first: select_local_gpu).
struct PreparedConfig {
  TrainConfig config;
  Device device;
};
PreparedConfig prepare_config(const std::string& path, const std::vector<std::string>& overrides,
                              const std::string& device);

}  // namespace minidl
