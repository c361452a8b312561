// `minidl train`: the run folder, the epoch loop, metrics, checkpoints, resume, NaN handling.
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>

#include "train/checkpoint.h"
#include "train/class_metrics.h"
#include "train/profile_command.h"
#include "train/run_folder.h"
#include "train/run_log.h"
#include "train/stop_signal.h"
#include "train/trainer.h"
#include "core/allocator.h"
#include "core/atomic_file.h"
#include "core/checked_math.h"
#include "core/error.h"
#include "core/json_limits.h"
#include "core/safetensors.h"
#include "core/settings.h"
#include "core/test_hooks.h"
#include "dist/communicator.h"
#include "dist/launch.h"

namespace minidl {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

constexpr const char* kCheckpoint = "checkpoint.safetensors";
constexpr const char* kWeights = "model.safetensors";

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string fixed(double v, int digits) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(digits);
  os << v;
  return os.str();
}

// --resume continues the run as it was configured; the settings it takes are a larger epoch
// count (--set epochs=N, to train longer) and accumulate_steps (--set accumulate_steps=K, for
// another number of ranks: check_micro_batches), besides --device. Anything else would silently
// make the resumed run differ from the one its logs describe, so it is refused. `*raised` tells
// whether the epoch count changed. Whether the run is finished needs its steps per epoch
// (check_resume_position).
TrainConfig resume_config(const TrainOptions& o, const CheckpointInfo& info, const std::string& run_dir,
                          bool* raised) {
  const std::string where = str("--resume ", run_dir);
  MINIDL_CHECK(o.config_path.empty(), where, ": --config cannot be combined with --resume (the run's config is ",
               "in its checkpoint; use --set epochs=N to train longer)");
  MINIDL_CHECK(o.output_dir.empty(), where, ": --output cannot be combined with --resume (the run continues in ",
               "its own folder)");
  MINIDL_CHECK(!o.overwrite, where, ": --overwrite cannot be combined with --resume");
  nlohmann::json j = info.config;
  for (const std::string& assignment : o.overrides) {
    const std::string key = assignment.substr(0, assignment.find('='));
    MINIDL_CHECK(key == "epochs" || key == "accumulate_steps", where, ": --set ", text_excerpt(key),
                 "=... cannot change a run being resumed (only --set epochs=N, to train longer, and --set ",
                 "accumulate_steps=K, to resume on another number of ranks)");
    apply_override(j, assignment);
  }
  const double before = parse_train_config(info.config).epochs;
  TrainConfig c = parse_train_config(j);
  if (!o.device.empty()) c.device = o.device;
  c.output_dir = run_dir;
  *raised = c.epochs != before;
  MINIDL_CHECK(o.max_steps == 0 || o.max_steps > info.step, where, ": --max-steps ", o.max_steps,
               " is already reached (the checkpoint is at step ", info.step, ")");
  return c;
}

// A step's gradients are the ordered sum over its micro-batches (world size x accumulate_steps),
// so a resumed run keeps their number to keep its bits; on another number of ranks,
// accumulate_steps makes up the difference.
void check_micro_batches(const CheckpointInfo& info, int64_t micro_batches, int world_size, const std::string& run_dir) {
  const int64_t accumulate = info.config.value("accumulate_steps", int64_t{1});
  const int64_t trained = info.world_size * accumulate;
  MINIDL_CHECK(trained == micro_batches, "--resume ", run_dir, ": the run was trained with ", trained, " micro-batches per step (world size ",
               info.world_size, " x accumulate_steps ", accumulate, "), this one would take ", micro_batches,
               " (world size ", world_size, "); ",
               trained % world_size == 0 ? str("resume with --set accumulate_steps=", trained / world_size,
                                               " to continue with the same bits")
                                         : str("use a world size that divides ", trained));
}

// The checkpoint's position must be a step of its epoch at this run's steps per epoch (inside an
// epoch it may be the epoch's end, written before the evaluation), and the partial epoch's sums
// must fit in the steps taken. A run at its last step with its evaluation logged is finished.
void check_resume_position(const CheckpointInfo& info, int64_t steps_per_epoch, int64_t total_steps,
                           int64_t batch_size, const std::string& run_dir, double epochs, bool epochs_set) {
  const std::string ckpt = run_dir + "/" + kCheckpoint;
  const int64_t epoch_start = checked_mul(info.epoch, steps_per_epoch, "checkpoint position");
  const int64_t last = epoch_start + steps_per_epoch - (info.epoch_seen > 0 ? 0 : 1);
  MINIDL_CHECK(info.step >= epoch_start && info.step <= last, "checkpoint '", ckpt, "': step ", info.step,
               " is not a step of epoch ", info.epoch + 1, " (steps ", epoch_start, "..", last, " at ",
               steps_per_epoch, " steps per epoch)");
  const double done = static_cast<double>(info.step) / static_cast<double>(steps_per_epoch);
  const bool finished = info.step >= total_steps && (info.epoch_seen == 0 || info.evaluated);
  if (finished || info.step > total_steps) {
    MINIDL_CHECK(epochs_set, "--resume ", run_dir, ": the run is finished (its checkpoint is at step ", info.step,
                 ", after ", done, " epochs); to train it further pass --set epochs=N with N > ", done);
    fail(str("--resume ", run_dir, ": --set epochs=", epochs, " is not more than the ", done, " epochs the run has done"));
  }
  const int64_t in_epoch = info.step - epoch_start;
  MINIDL_CHECK(info.epoch_seen <= checked_mul(in_epoch, batch_size, "checkpoint position") &&
                   (in_epoch == 0) == (info.epoch_seen == 0),
               "checkpoint '", ckpt, "': ", info.epoch_seen, " images seen in the epoch do not match its ", in_epoch,
               " steps of ", batch_size);
}

// The checkpoint --resume continues from; a folder without one is explained: a run killed before
// its first checkpoint is started again with --restart.
CheckpointInfo read_resume_checkpoint(const std::string& run_dir) {
  const std::string ckpt = run_dir + "/" + kCheckpoint;
  if (!fs::exists(ckpt)) {
    MINIDL_CHECK(!fs::exists(run_dir + "/config.json"), "--resume ", run_dir, ": the run stopped before its first ",
                 "checkpoint, so there is nothing to resume; start it again with: minidl train --resume ", run_dir,
                 " --restart");
    fail(str("--resume ", run_dir, ": no ", kCheckpoint, " there (nothing to resume)"));
  }
  return read_checkpoint_info(ckpt);
}

// --resume DIR --restart: the run's own config, as it was; nothing else may change.
TrainConfig restart_config(const TrainOptions& o, const std::string& run_dir) {
  MINIDL_CHECK(o.config_path.empty() && o.output_dir.empty() && o.overrides.empty() && !o.overwrite,
               "--restart starts the run in ", run_dir, " again as it was configured: --config, --output, --set and ",
               "--overwrite cannot be combined with it");
  return load_train_config(run_dir + "/config.json", {}, o.device, run_dir);
}

bool same_position(const CheckpointInfo& a, const CheckpointInfo& b) {
  return a.step == b.step && a.epoch == b.epoch && a.evaluated == b.evaluated && a.config == b.config;
}

// The signal that stops the run at this step boundary, the same on every rank: the first rank's
// (in rank order) that received one, so all ranks stop after the same step.
int agreed_stop_signal(Communicator& comm, Device device) {
  const int sig = StopSignals::received();
  if (comm.world_size() == 1) return sig;
  const Tensor mine = Tensor::from_vector(std::vector<int32_t>{sig}, {1}, device);
  Tensor all = Tensor::empty({comm.world_size()}, DType::Int32, device);
  comm.all_gather(mine, all);
  for (const int32_t s : all.to(Device::cpu()).values<int32_t>())
    if (s != 0) return s;
  return 0;
}

}  // namespace

int train_command(const TrainOptions& options) {
  MINIDL_CHECK(options.max_steps >= 0, "--max-steps: must be >= 0 (0: no limit), got ", options.max_steps);
  MINIDL_CHECK(!options.restart || !options.resume_dir.empty(), "--restart: only with --resume RUN_DIR (it starts ",
               "that run again from its config.json)");
  const bool resume = !options.resume_dir.empty() && !options.restart;
  const Launch launch = detect_launch();
  // Everything is read and checked (config, checkpoint, data, model) before the run folder is
  // touched: a refused input changes nothing on disk.
  TrainConfig config;
  std::string run_dir;
  CheckpointInfo start;  // where the run starts: the checkpoint's position on --resume
  bool epochs_raised = false;
  if (resume) {
    run_dir = options.resume_dir;
    start = read_resume_checkpoint(run_dir);
    config = resume_config(options, start, run_dir, &epochs_raised);
  } else if (options.restart) {
    run_dir = options.resume_dir;
    config = restart_config(options, run_dir);
  } else {
    MINIDL_CHECK(!options.config_path.empty(), "train: --config FILE is required (or --resume RUN_DIR)");
    config = load_train_config(options.config_path, options.overrides, options.device, options.output_dir);
    run_dir = config.output_dir;
  }
  // From here a signal stops the run at the next step boundary instead of killing it.
  StopSignals signals;

  // The rank's GPU is chosen before CUDA starts. Rank 0 alone writes the run folder; every rank
  // reads the checkpoint it resumes from.
  select_local_gpu(launch);
  const Device device = setup_compute(config);
  const std::shared_ptr<Communicator> comm = make_communicator(options.dist, launch, device);
  const bool writer = comm->rank() == 0;
  Trainer trainer(config, device);
  trainer.set_communicator(comm);
  MINIDL_CHECK(!options.profile || trainer.micro_batches() == 1, "--profile times steps of one micro-batch; this ",
               "run has ", trainer.micro_batches(), " (world size x accumulate_steps): profile with accumulate_steps 1 "
               "on one process");
  const int64_t steps_per_epoch = trainer.steps_per_epoch();
  const std::string ckpt = run_dir + "/" + kCheckpoint;
  // The folder checks need the resolved config (a fresh run may reuse a folder whose run had
  // the same one) and the steps per epoch (the resume position).
  if (resume) {
    check_resume_position(start, steps_per_epoch, trainer.total_steps(), config.batch_size, run_dir, config.epochs,
                          !options.overrides.empty());
    check_micro_batches(start, trainer.micro_batches(), comm->world_size(), run_dir);
  } else if (writer) {
    check_fresh_run_folder(run_dir, options.overwrite, trainer.resolved_config(), options.restart);
  }
  if (const int sig = StopSignals::received()) {
    std::cerr << "minidl: stopped by " << signal_name(sig) << " before the run started; nothing was written" << std::endl;
    return 128 + sig;
  }
  // The folder is locked before anything in it changes.
  if (!resume && writer) create_run_folder(run_dir);
  test_pause_point("BEFORE_LOCK");
  std::optional<RunFolderLock> lock;
  if (writer) lock.emplace(run_dir);
  // Every check again, under the lock: another run may have started, resumed or finished in the
  // folder since they were made.
  std::vector<std::string> replaced;
  if (resume) {
    // Loaded into memory only: a refused checkpoint still changes nothing on disk.
    const CheckpointInfo now = load_checkpoint(ckpt, trainer.model(), trainer.optimizer());
    MINIDL_CHECK(same_position(now, start), "--resume ", run_dir, ": its checkpoint changed while this command was ",
                 "starting (another minidl process trained there; it is now at step ", now.step,
                 "): run the command again");
    trainer.load_grad_scaler_state(now.grad_scaler, ckpt);
  }
  if (resume && writer) {
    check_jsonl(run_dir + "/metrics.jsonl");
    check_jsonl(run_dir + "/steps.jsonl");
    truncate_jsonl(run_dir + "/metrics.jsonl", "epoch", start.epoch + 1);
    truncate_jsonl(run_dir + "/steps.jsonl", "step", start.step);
    if (trainer.resolved_config() != start.config)  // --set epochs or accumulate_steps
      write_file_atomic(run_dir + "/config.json", trainer.resolved_config().dump(2) + "\n", "run config");
  } else if (writer) {
    if (check_fresh_run_folder(run_dir, options.overwrite, trainer.resolved_config(), options.restart) ==
        FreshFolder::Replace)
      replaced = remove_run_files(run_dir);
    write_file_atomic(run_dir + "/config.json", trainer.resolved_config().dump(2) + "\n", "run config");
    write_file_atomic(run_dir + "/classes.json", nlohmann::json(trainer.classes()).dump() + "\n", "class list");
  }
  const std::vector<std::string> stale = writer ? remove_stale_temp_files(run_dir) : std::vector<std::string>();
  RunLog log(run_dir, writer);
  if (config.tensorboard) log.enable_tensorboard(start.step);
  // The run itself; any error from here on is written to log.txt as well as the terminal.
  auto run = [&]() -> int {
    if (!replaced.empty())
      log.line(str(options.overwrite ? "--overwrite" : "a run stopped before its first checkpoint",
                   ": removed the earlier run's ", join(replaced)));
    if (!stale.empty()) log.line(str("removed temporary files left by killed runs: ", join(stale)));
    int64_t params = 0;
    for (auto& kv : trainer.model().named_parameters()) params += kv.second.numel();
    log.line(str("minidl train: ", device.str(), ", ", params, " parameters, ", steps_per_epoch,
                 " steps/epoch of ", config.batch_size, ", ", config.epochs, " epochs, seed ", config.seed, ", ",
                 config.deterministic ? "deterministic (same config and seed give the same bits)"
                                      : "NOT deterministic (cuDNN may pick non-deterministic algorithms)",
                 device.is_cuda() ? (config.allow_tf32 ? ", TF32 convolutions" : ", fp32 convolutions") : "",
                 ", run folder ", run_dir));
    if (trainer.micro_batches() > 1)
      log.line(str("data parallel: world size ", comm->world_size(), " (", comm->backend(), "), ",
                   config.accumulate_steps, " micro-batch", config.accumulate_steps > 1 ? "es" : "", " of ",
                   config.batch_size / trainer.micro_batches(), " per rank per step, gradients summed in ",
                   "micro-batch order"));
    for (const std::string& note : trainer.data_notes())
      if (!note.empty()) log.line("data: " + note);
    const int64_t start_epoch = start.epoch;
    int64_t step = start.step;
    const int64_t resumed_in_epoch = step - start_epoch * steps_per_epoch;
    if (resume)
      log.line(str("resumed at step ", step, " (", start_epoch, " epochs done",
                   resumed_in_epoch == steps_per_epoch ? str(" and epoch ", start_epoch + 1, "'s steps; its evaluation runs again")
                   : resumed_in_epoch > 0 ? str(" and ", resumed_in_epoch, " steps of epoch ", start_epoch + 1) : "", ")",
                   epochs_raised ? str("; epochs raised to ", config.epochs) : std::string()));

    reset_peak_device_memory();
    // One record per step of an epoch, written by the GPU as the steps finish (pinned memory).
    const std::shared_ptr<void> record_memory =
        allocate_pinned(static_cast<size_t>(steps_per_epoch) * sizeof(Trainer::StepRecord));
    auto* records = static_cast<Trainer::StepRecord*>(record_memory.get());
    double train_seconds = 0, last_test = 0, last_tta = -1;
    int64_t trained_images = 0;
    int64_t checkpointed_step = resume ? start.step : -1;  // -1: no checkpoint yet
    Clock::time_point checkpointed_at = Clock::now();
    bool evaluated = false;         // an evaluation ran in this process
    bool stopped_at_limit = false;  // --max-steps reached: no further epoch starts
    // Writes the checkpoint at `info`'s position (the caller fills in the position and sums).
    // Rank 0 alone writes; every rank keeps the same bookkeeping.
    auto checkpoint = [&](CheckpointInfo info) {
      log.end_progress();  // steps.jsonl holds every step the checkpoint has trained
      if (writer) {
        info.world_size = comm->world_size();
        info.config = trainer.resolved_config();
        info.grad_scaler = trainer.grad_scaler_state();
        info.classes = trainer.classes();
        write_run_checkpoint(run_dir, trainer.model(), trainer.optimizer(), info, checkpointed_step,
                             config.checkpoint_keep);
      }
      checkpointed_step = info.step;
      checkpointed_at = Clock::now();
    };
    for (int64_t epoch = start_epoch; epoch < config.epochs && !stopped_at_limit; ++epoch) {
      const bool profile_now = options.profile && epoch == start_epoch;
      // --profile: 5 warm-up and 20 measured steps (fewer in a short epoch) at the start of the run.
      std::unique_ptr<StepProfiler> profiler;
      if (profile_now) {
        const int64_t measure = std::max<int64_t>(1, std::min<int64_t>(20, (steps_per_epoch - 1) / 3));
        profiler = std::make_unique<StepProfiler>(device, std::min<int64_t>(5, measure), measure);
      }
      Loader& loader = trainer.train_loader();
      loader.start_epoch(epoch);
      // A checkpoint written inside this epoch: its batches were trained on already, and its sums
      // carry on, so the epoch ends as if it had not been stopped.
      CheckpointInfo sums;
      if (epoch == start_epoch) {
        sums = start;
        for (int64_t i = start_epoch * steps_per_epoch; i < start.step; ++i)
          MINIDL_CHECK(loader.advance(), "data loader: epoch ", epoch + 1, " ended before the checkpoint's step");
      }
      const auto t0 = Clock::now();
      const int64_t epoch_first = step;  // the first step of this epoch that this process runs
      int64_t flushed = 0;               // records of this epoch already read
      // The records of the steps run since the last flush come to the host (this is also the
      // synchronization), go to steps.jsonl and into the epoch's sums; false on a NaN or
      // infinite loss.
      auto flush = [&]() {
        synchronize(device);
        for (; epoch_first + flushed < step; ++flushed) {
          const int64_t s = epoch_first + flushed;
          const float loss = records[flushed].loss;
          log.step(s, epoch, loss);
          if (!std::isfinite(loss)) {
            log.line(str("error: the loss is ", std::isnan(loss) ? "NaN" : loss > 0 ? "+inf" : "-inf", " at step ", s,
                         " (epoch ", epoch + 1, "); stopping. ",
                         checkpointed_step >= 0
                             ? str("The last good checkpoint is ", run_dir, "/", kCheckpoint, " (at step ",
                                   checkpointed_step, ")")
                             : std::string("No checkpoint was written yet")));
            return false;
          }
          sums.epoch_loss_sum += loss;
          sums.epoch_correct += records[flushed].correct;
          sums.epoch_seen += config.batch_size;
        }
        return true;
      };
      // This epoch's position and sums so far (after a flush).
      auto position = [&](bool evaluated_here) {
        CheckpointInfo info = sums;
        info.epoch = epoch;
        info.step = step;
        info.epoch_seconds += since(t0);
        info.evaluated = evaluated_here;
        return info;
      };
      while (true) {
        if (options.max_steps > 0 && step >= options.max_steps) {
          stopped_at_limit = true;
          break;
        }
        if (step >= trainer.total_steps()) break;  // a fractional last epoch ends part-way
        // The epoch's last step is done: it ends (checkpoint, evaluation) before a pending signal
        // is honoured, so a signal never saves a position between an epoch's steps and its end.
        if (step - epoch * steps_per_epoch >= steps_per_epoch) break;
        if (const int sig = agreed_stop_signal(*comm, device)) {
          if (!flush()) return 3;
          std::string saved = step == 0 ? std::string("no step was trained, nothing to save")
                                        : str("the checkpoint at step ", step, " is current");
          if (step > 0 && step != checkpointed_step) {
            checkpoint(position(false));
            saved = str("wrote ", run_dir, "/", kCheckpoint, " at step ", step);
          }
          log.line(str("stopped by ", signal_name(sig), " after step ", step, " (epoch ", epoch + 1, ", step ",
                       step - epoch * steps_per_epoch, " of ", steps_per_epoch, "): ", saved,
                       "; continue with: minidl train --resume ", run_dir));
          return 128 + sig;
        }
        const bool steps_due = config.checkpoint_every_steps > 0 && step % config.checkpoint_every_steps == 0;
        const bool time_due =
            config.checkpoint_every_minutes > 0 && since(checkpointed_at) >= 60 * config.checkpoint_every_minutes;
        if ((steps_due || time_due) && step > 0 && step != checkpointed_step) {
          if (!flush()) return 3;
          checkpoint(position(false));
        }
        if (profiler) profiler->before_step();
        if (!trainer.train_step(step, &records[step - epoch_first], profiler ? profiler->active() : nullptr)) break;
        if (profiler) profiler->after_step();
        ++step;
        test_kill_point("step", step);
        log.progress(epoch + 1, config.epochs, step - epoch * steps_per_epoch, steps_per_epoch, since(t0));
      }
      const int64_t epoch_steps = step - epoch * steps_per_epoch;
      // A resumed checkpoint at an epoch's end written before its evaluation: the epoch ends
      // again (evaluation, metrics) without a step.
      const bool eval_pending = epoch == start_epoch && epoch_steps > 0 && !start.evaluated;
      if (step == epoch_first && !eval_pending) break;
      const int64_t seen_before = sums.epoch_seen;
      if (!flush()) return 3;
      const double lr = trainer.lr_at(step - 1);
      if (epoch == start_epoch) log.line(str("training step: ", trainer.step_mode()));
      const double epoch_seconds = sums.epoch_seconds + since(t0);
      train_seconds += since(t0);
      trained_images += sums.epoch_seen - seen_before;
      if (profiler) profiler->finish(log, run_dir);
      // The checkpoint comes before the evaluation: a run killed while evaluating loses no
      // training, and evaluates this epoch again when resumed.
      const CheckpointInfo before_eval = position(false);
      if (step != checkpointed_step) checkpoint(before_eval);

      test_kill_point("eval", epoch + 1);
      const auto e0 = Clock::now();
      // Every rank holds the same weights, so rank 0's accuracy is every rank's; the others,
      // which print nothing, skip the test pass.
      const Trainer::EvalResult eval = writer ? trainer.evaluate(config.tta) : Trainer::EvalResult();
      evaluated = true;
      last_test = eval.acc;
      last_tta = eval.tta_acc;
      const double eval_seconds = since(e0);
      const double seen = static_cast<double>(sums.epoch_seen);
      nlohmann::json record = {{"epoch", epoch + 1},
                               {"step", step},
                               {"train_loss", sums.epoch_loss_sum / static_cast<double>(epoch_steps)},
                               {"train_acc", 100.0 * static_cast<double>(sums.epoch_correct) / seen},
                               {"test_acc", last_test},
                               {"lr", lr},
                               {"seconds", epoch_seconds},
                               {"eval_seconds", eval_seconds},
                               {"images_per_s", seen / epoch_seconds}};
      if (last_tta >= 0) record["test_acc_tta"] = last_tta;
      if (const GradScaler* scaler = trainer.grad_scaler()) {
        record["loss_scale"] = scaler->scale();
        record["skipped_steps"] = scaler->skipped_steps();
      }
      log.metrics(record);
      log.line(str("epoch ", epoch + 1, "/", config.epochs, "  loss ", fixed(record["train_loss"], 4), "  train ",
                   fixed(record["train_acc"], 2), "%  test ", fixed(last_test, 2), "%",
                   last_tta >= 0 ? str("  test+", to_string(config.tta), " ", fixed(last_tta, 2), "%") : std::string(),
                   "  lr ", fixed(lr, 4), "  ", fixed(epoch_seconds, 1), "s (", fixed(record["images_per_s"], 0),
                   " img/s)  eval ", fixed(eval_seconds, 1), "s"));
      if (writer) save_safetensors(run_dir + "/" + kWeights, trainer.model().state_dict(), {{"format", "pt"}});
      // Where the run ends, the checkpoint records that the evaluation is logged, so a resume
      // does not evaluate again (a finished run is refused; --max-steps or more epochs go on).
      if (stopped_at_limit || step >= trainer.total_steps()) {
        CheckpointInfo after_eval = before_eval;
        if (epoch_steps == steps_per_epoch) {
          after_eval = CheckpointInfo{};
          after_eval.epoch = epoch + 1;
          after_eval.step = step;
        } else {
          after_eval.evaluated = true;
        }
        checkpoint(after_eval);
      }
    }
    const DeviceMemoryStats mem = device_memory_stats();
    nlohmann::json summary = {{"test_acc", last_test},
                              {"train_seconds", train_seconds},
                              {"images_per_s", train_seconds > 0 ? trained_images / train_seconds : 0.0},
                              {"steps", step},
                              {"device", device.str()},
                              {"world_size", comm->world_size()},
                              {"deterministic", config.deterministic},
                              {"peak_device_bytes", mem.peak_bytes}};
    if (last_tta >= 0) summary["test_acc_tta"] = last_tta;
    if (!writer) return 0;
    if (evaluated) add_class_metrics(summary, trainer, config.tta, log);
    write_file_atomic(run_dir + "/summary.json", summary.dump(2) + "\n", "run summary");
    log.line(str("done: test ", fixed(last_test, 2), "%",
                 last_tta >= 0 ? str(" (", to_string(config.tta), " TTA ", fixed(last_tta, 2), "%)") : std::string(), ", ", step,
                 " steps, training ", fixed(train_seconds, 1), "s",
                 str(" (", fixed(train_seconds / std::max(1.0, config.epochs - static_cast<double>(start_epoch)), 1), "s/epoch)"),
                 ", ", fixed(summary["images_per_s"], 0), " img/s",
                 device.is_cuda() ? str(", peak device memory ", fixed(mem.peak_bytes / 1e9, 2), " GB") : std::string(),
                 stopped_at_limit ? str(" [stopped at --max-steps ", options.max_steps, "]") : std::string()));
    return 0;
  };
  try {
    return run();
  } catch (const std::exception& e) {
    log.error(e.what());  // fatal errors reach log.txt too, not only the terminal
    throw;
  }
}

}  // namespace minidl
