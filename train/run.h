// A training run as a library call: `Run` reads and checks the config (or the checkpoint it
// resumes), builds the trainer, owns the run folder (lock, config.json, logs, checkpoints,
// weights, summary.json) and the one epoch loop: steps, checkpoints by cadence, evaluation,
// metrics, stop signals, NaN losses, resume. `minidl train` is a thin shell around it; the
// benchmarks and the profiler step through a Run without a folder.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "train/checkpoint.h"
#include "train/config.h"
#include "train/model_selection.h"
#include "train/progress.h"
#include "train/step_observer.h"
#include "train/trainer.h"

namespace minidl {

class CheckpointWriter;
class Communicator;
class RunLog;
class RunFolderLock;
class StopSignals;

// What `minidl train` asks of a run.
struct RunOptions {
  std::string config_path;
  std::vector<std::string> overrides;   // --set key.path=value
  std::string device;                   // "" = the config's
  std::string output_dir;               // "" = the config's output.dir
  std::string resume_dir;               // continue the run in this folder
  bool overwrite = false;               // a fresh run may replace the run files in its folder
  bool restart = false;                 // with resume_dir: start that run again (it has no checkpoint)
  int64_t max_steps = 0;                // > 0: stop after this many global steps (repro, smoke tests); 0: none
  bool profile = false;                 // print a per-layer breakdown after the first epoch
  RunProfilerFactory profiler;          // what profile runs (profiling/step_profiler.h); needed with it
  std::string dist = "auto";            // the communicator backend (distributed/communicator.h)
  double dist_timeout = 600;            // seconds a rank waits in a collective (kDefaultDistTimeoutSeconds)
};

// How a run ended and what it measured.
struct RunResult {
  // The process exit code: 0 finished (or stopped at max_steps), 3 a NaN or infinite loss,
  // 128 + signal when a stop signal ended it (its checkpoint is current).
  int exit_code = 0;
  int64_t steps = 0;          // global steps trained, the resumed ones included
  double test_acc = 0;        // the last test evaluation's, percent
  double tta_acc = -1;        // with the config's TTA; < 0 without
  double val_acc = -1;        // the last validation evaluation's, percent; < 0 without a validation split
  bool stopped_early = false;  // early_stopping ended the run before its last epoch
  double train_seconds = 0;   // training time in this process (no evaluation)
  nlohmann::json summary;     // what summary.json holds (null for a run without a folder)
};

class Run {
 public:
  // A run in its folder (minidl train). Everything is read and checked here (config,
  // checkpoint, data, model, the folder) before anything on disk changes; from here a SIGINT or
  // SIGTERM stops the run at a step boundary instead of killing it.
  explicit Run(const RunOptions& options);
  // A run without a folder on data sets already loaded (on the host or on `device`): nothing is
  // written or printed, no signal is caught, and the model is evaluated once, after the last
  // step (bench accuracy times exactly this).
  // max_steps > 0 stops it after that many steps.
  Run(const TrainConfig& config, Device device, Dataset train_set, Dataset test_set, int64_t max_steps = 0);
  ~Run();
  Run(const Run&) = delete;
  Run& operator=(const Run&) = delete;

  // Trains to the end of the config's epochs (or options.max_steps, a stop signal, a NaN loss).
  // A run in a folder takes the folder's lock first and checks it again under the lock; it is
  // executed once (a second call is an error).
  RunResult execute();

  // One training step at the run's position, starting the next epoch when this one has no batch
  // left: nothing is logged, evaluated or checkpointed (bench train and the profiler time steps
  // this way). The step's record is written asynchronously and not read.
  void step(StepObserver* observer = nullptr);
  int64_t next_step() const { return step_; }

  // The ranks this run is one of (a world of one until set; Trainer::set_communicator).
  void set_communicator(std::shared_ptr<Communicator> comm);

  Trainer& trainer() { return *trainer_; }
  const TrainConfig& config() const { return config_; }
  Device device() const { return device_; }
  Communicator& communicator() { return *comm_; }
  const std::string& run_dir() const { return run_dir_; }

 private:
  struct Epoch;  // the epoch in progress: its position and sums (run.cpp)
  bool writer() const;
  // The steps this run will train: the config's, or fewer under --max-steps.
  int64_t steps_to_run() const;
  // Locks the folder, checks it again under the lock, loads the resumed checkpoint and writes the
  // run's config; returns the files it removed (--overwrite, or a run without a checkpoint).
  std::vector<std::string> take_folder();
  void log_start(const std::vector<std::string>& replaced, const std::vector<std::string>& stale);
  void start_epoch(int64_t epoch);
  // The records of the steps run since the last flush, read after a synchronize, go to
  // steps.jsonl and into the epoch's sums; false on a NaN or infinite loss (logged).
  bool flush(Epoch& e);
  CheckpointInfo position(const Epoch& e, bool evaluated) const;
  // Takes the checkpoint at `info`; rank 0's is written in the background (CheckpointWriter), with
  // model.safetensors from the same snapshot when `with_weights`.
  void checkpoint(CheckpointInfo info, bool with_weights = false);
  // Waits for the checkpoint write in flight (throwing its error): from here the last checkpoint
  // taken is complete on disk. Every place the run ends waits so.
  void wait_for_checkpoint();
  // The epoch's end: checkpoint, evaluation (of the validation split when there is one, else of
  // the test split), metrics, model selection, weights, and where the run ends the test split's
  // evaluation and the final checkpoint. False on a NaN loss.
  bool end_epoch(Epoch& e);
  // One evaluation of `split` with the config's TTA (a progress line while it runs), timed for
  // the ETA; rank 0's only (the others return an empty result).
  Trainer::EvalResult evaluate(Split split);
  // eval.every_steps: the held-out split evaluated between two steps of epoch `e`, into evals.jsonl.
  void evaluate_within_epoch(Epoch& e);
  // Early stopping and save_best after an evaluated epoch `record`; every rank takes rank 0's
  // decision. Returns whether best.safetensors was written.
  bool select(const nlohmann::json& record, int64_t epoch);
  // A segmentation's test Dice after an epoch: the run ends where it reaches eval.target_dice.
  void reach_target(double dice);
  // Each class's Dice by class name (null where no voxel is labelled with it), and the foreground
  // classes' as log text.
  nlohmann::json class_dice_json(const std::vector<double>& dice) const;
  std::string class_dice_text(const std::vector<double>& dice) const;
  // The test split's accuracy of best.safetensors' weights (a pass only when they are not the final
  // ones), the final weights restored after; where a run with a validation split and save_best ends.
  void evaluate_best();
  void show_progress(const Epoch& e);
  int stopped_by(int sig, Epoch& e);
  RunResult finish();
  RunResult ended(int exit_code) const;  // a run stopped early: by a signal, or a NaN loss
  RunResult train_loop();

  RunOptions options_;
  TrainConfig config_;
  Device device_;
  bool in_folder_ = false;       // false: a run without a folder (nothing written or printed)
  bool executed_ = false;        // execute() ran: a run in a folder trains once
  std::string run_dir_;
  bool resume_ = false;
  bool epochs_raised_ = false;   // --resume --set epochs=N raised the epoch count
  CheckpointInfo start_;         // where the run starts: the checkpoint's position on --resume
  std::unique_ptr<StopSignals> signals_;
  std::shared_ptr<Communicator> comm_;
  std::unique_ptr<Trainer> trainer_;
  std::unique_ptr<RunFolderLock> lock_;
  // Rank 0's checkpoints; after lock_, so it is gone (its write finished) before the lock is.
  std::unique_ptr<CheckpointWriter> checkpoint_writer_;
  std::unique_ptr<RunLog> log_;
  std::unique_ptr<RunProfiler> profiler_;  // --profile, during the first epoch
  std::unique_ptr<ModelSelection> selection_;
  std::unique_ptr<Eta> eta_;
  RunningLoss running_loss_;
  // One record per step of an epoch, written by the GPU as the steps finish (pinned memory).
  std::shared_ptr<void> record_memory_;
  Trainer::StepRecord* records_ = nullptr;

  int64_t epoch_ = -1;             // the epoch whose batches the loader gives (-1: none started)
  int64_t step_ = 0;               // the next global step
  int64_t checkpointed_step_ = -1;  // the last checkpoint taken (-1: none yet)
  int64_t saved_step_ = -1;         // the last one known complete on disk (-1: none)
  std::chrono::steady_clock::time_point checkpointed_at_;
  bool stopped_at_limit_ = false;  // max_steps reached: no further epoch starts
  bool stopped_early_ = false;     // early stopping ended the run
  bool target_reached_ = false;    // a test Dice reached eval.target_dice: the run ends
  double time_to_target_ = 0;      // the training seconds (evaluation excluded) until it did
  double train_seconds_ = 0, last_test_ = 0, last_tta_ = -1;
  // The last evaluation of the test split (for the per-class metrics) and of the validation split.
  std::optional<Trainer::EvalResult> last_test_eval_, last_val_eval_, best_test_eval_;
  int64_t trained_images_ = 0;
};

// Runs `options` to its end; the exit code (RunResult::exit_code). Errors are thrown (and, once
// the run folder exists, written to its log.txt too).
int run_training(const RunOptions& options);

}  // namespace minidl
