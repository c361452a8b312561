// The training config: one JSON file, checked strictly (an unknown key or a wrong type is an
// error naming its key path), overridable from the command line with --set key.path=value, and
// written back resolved (every default filled in) into the run folder.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/enum_names.h"
#include "data/tta.h"
#include "train/init_from.h"
#include "train/monitor.h"
#include "train/precision.h"

namespace minidl {

// The training loss (loss.type): cross-entropy (per image, token or voxel), MONAI's DiceLoss, or
// their sum with equal weights (MONAI's DiceCELoss); layers/loss/loss.h and dice.h.
enum class LossType { CrossEntropy, Dice, DiceCe };
template <>
struct EnumNames<LossType> {
  static constexpr EnumName<LossType> values[] = {
      {LossType::CrossEntropy, "cross_entropy"}, {LossType::Dice, "dice"}, {LossType::DiceCe, "dice_ce"}};
};

// Bounds on the run's counts (far beyond any CIFAR-10 run) so step counts cannot overflow.
constexpr int64_t kMaxEpochs = 1000000;
constexpr int64_t kMaxBatchSize = 1000000;

// The parsed run config. Every key's type, default, allowed values and meaning are in one table,
// config_keys() (train/config_keys.h), which parse_train_config and to_json read and which
// prints docs/config.md; the members here hold the values, named as the keys.
struct TrainConfig {
  uint64_t seed{};
  bool deterministic{};
  bool allow_tf32{};
  bool cuda_graph{};
  bool norm_single_read{};
  // std::nullopt: "auto", chosen for the run's device by resolve_for_device; a run's Trainer and
  // every command that computes read them resolved.
  std::optional<Precision> precision;
  std::optional<MemoryFormat> memory_format;
  std::string device;
  double epochs{};          // may be fractional (9.9): the run takes ceil(epochs * steps per epoch) steps
  int64_t batch_size{};     // the global batch: all ranks' micro-batches of one optimizer step
  int64_t accumulate_steps{};
  double bucket_mb{};       // data parallel: gradient MiB per bucket reduced during backward (0: after it)
  nlohmann::json data;      // parsed by data/ (data/options.h)
  nlohmann::json model;     // {"layers": [...]} (layers/registry.h)
  LossType loss_type{};
  double label_smoothing{};
  nlohmann::json optimizer;   // parsed by optim/ (optim/optimizer.h)
  nlohmann::json schedule;    // parsed by optim/ (optim/optimizer.h)
  nlohmann::json init;        // parameter init rules (train/param_rules.h)
  nlohmann::json freeze;      // parameter freeze rules (train/param_rules.h)
  InitFromOptions init_from;  // trained weights to start from (train/init_from.h)
  nlohmann::json lookahead;   // null: off; else optim/lookahead.h options
  nlohmann::json grad_scaler; // null: defaults; fp16 only (optim/grad_scaler.h)
  double grad_clip{};         // 0: off
  TtaMode tta{};
  double tta_share{};  // < 1: selective TTA over this share of the test images
  TtaWeights tta_weights{};
  int64_t eval_batch_size{};
  int64_t eval_every_steps{};
  double target_dice{};  // > 0: the run stops at the first epoch whose test Dice reaches it
  std::string output_dir;
  bool progress{};
  bool tensorboard{};
  int64_t checkpoint_every_steps{};
  double checkpoint_every_minutes{};
  int64_t checkpoint_keep{};
  // checkpoint.save_best: best.safetensors holds the weights of the epoch where best_monitor was
  // best (train/model_selection.h).
  bool save_best{};
  Metric best_monitor{};
  std::optional<MonitorMode> best_mode;  // std::nullopt: "auto" (auto_mode)
  // early_stopping: off while the patience is unset (train/model_selection.h).
  std::optional<int64_t> early_stopping_patience;
  Metric early_stopping_monitor{};
  std::optional<MonitorMode> early_stopping_mode;
  double early_stopping_min_delta{};

  // The config as JSON with every default filled in (what config.json in a run folder holds).
  nlohmann::json to_json() const;
};

// Reads a JSON config file (at most 16 MiB, nested at most 64 deep: core/json_limits.h) holding
// an object, naming the file and the parse error position on failure.
nlohmann::json read_json_file(const std::string& path);
// Applies "a.b.c=value" (value parsed as JSON, else taken as a string); list items by index
// ("model.layers.1.relu=true"). Errors name the override.
void apply_override(nlohmann::json& config, const std::string& assignment);
// Parses and checks a config object.
TrainConfig parse_train_config(const nlohmann::json& config);
// The config with an "auto" precision and memory_format replaced by what they mean on `device`
// (auto_precision and auto_memory_format, train/precision.h); a value the config names stays. A
// run resolves its config as soon as its device is known, so its config.json, checkpoints and
// summary record the values it trained with, and a resume, a restart, `minidl repro` or an export
// of the run reads those rather than choosing again.
TrainConfig resolve_for_device(TrainConfig config, Device device);

}  // namespace minidl
