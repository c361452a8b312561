// Choosing a model on the validation split while a run trains: checkpoint.save_best keeps the
// weights of the best epoch so far (best.safetensors, as Lightning's ModelCheckpoint with
// save_top_k=1) and early_stopping ends the run after `patience` epochs in a row without an
// improvement (Lightning's EarlyStopping). Both read the epoch's metrics record after its
// evaluation. Their state goes into every checkpoint (metadata "selection"), so a run stopped and
// resumed makes the same decisions as one that was not.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "train/config.h"

namespace minidl {

// One metric watched over the epochs.
struct MetricWatch {
  Metric metric = Metric::ValLoss;
  MonitorMode mode = MonitorMode::Min;
  double min_delta = 0;  // the least change that counts as an improvement
  // The state: the best value so far (seen: any), the epoch (1-based) and global step it came at,
  // and the evaluations since then without an improvement.
  bool seen = false;
  double best = 0;
  int64_t best_epoch = 0;
  int64_t best_step = 0;
  int64_t wait = 0;

  // Whether `value` improves on the best by more than min_delta (the first value always does); a
  // non-finite value never does.
  bool improves(double value) const;
  // Takes the epoch's value; true when it is a new best.
  bool update(double value, int64_t epoch, int64_t step);
  nlohmann::json state() const;
  // Restores state(); errors name `where` and the field.
  void load_state(const nlohmann::json& state, const std::string& where);
};

class ModelSelection {
 public:
  explicit ModelSelection(const TrainConfig& config);
  bool save_best() const { return save_best_; }
  bool early_stopping() const { return patience_ >= 0; }
  // Errors naming the key when a val_* metric is watched and the data has no validation split.
  void check_data(bool has_validation) const;

  // What an evaluated epoch decided, from its metrics record (which holds every watched metric).
  struct Decision {
    bool new_best = false;  // save_best: write best.safetensors now
    bool stop = false;      // early stopping: the run ends after this epoch
  };
  Decision update(const nlohmann::json& record, int64_t epoch, int64_t step);
  // True once early stopping has decided to stop (also in a resumed run's restored state): the
  // last epoch did not improve, and `patience` epochs in a row have not (Lightning's rule).
  bool stopped() const { return early_stopping() && stop_.wait > 0 && stop_.wait >= patience_; }

  // The state for a checkpoint's metadata (null when neither is on), and its restore.
  nlohmann::json state() const;
  void load_state(const nlohmann::json& state, const std::string& where);

  const MetricWatch& best() const { return best_; }
  // "early stopping: val_loss has not improved by more than 0 for 3 epochs (best 0.4312 at epoch 4)"
  std::string stop_reason() const;
  // best.safetensors' metadata and summary.json's "best": epoch, step, monitor, mode, value.
  nlohmann::json best_record() const;

 private:
  bool save_best_ = false;
  int64_t patience_ = -1;  // -1: no early stopping
  MetricWatch best_, stop_;
};

}  // namespace minidl
