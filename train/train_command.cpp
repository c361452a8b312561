// `minidl train`: the run folder, the epoch loop, metrics, checkpoints, resume, NaN handling.
#include <chrono>
#include <cmath>
#include <filesystem>
#include <sstream>

#include "train/checkpoint.h"
#include "train/profile_command.h"
#include "train/run_log.h"
#include "train/trainer.h"
#include "core/allocator.h"
#include "core/error.h"
#include "core/safetensors.h"
#include "core/settings.h"

namespace minidl {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

constexpr const char* kCheckpoint = "checkpoint.safetensors";
constexpr const char* kWeights = "model.safetensors";

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string fixed(double v, int digits) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(digits);
  os << v;
  return os.str();
}

void write_text_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << text;
    MINIDL_CHECK(f.good(), "cannot write '", tmp, "'");
  }
  fs::rename(tmp, path);
}

}  // namespace

int train_command(const TrainOptions& options) {
  TrainConfig config;
  std::string run_dir;
  if (!options.resume_dir.empty()) {
    run_dir = options.resume_dir;
    const std::string ckpt = run_dir + "/" + kCheckpoint;
    MINIDL_CHECK(fs::exists(ckpt), "--resume ", run_dir, ": no ", kCheckpoint, " there (nothing to resume)");
    nlohmann::json j = read_checkpoint_info(ckpt).config;
    if (!options.device.empty()) j["device"] = options.device;
    j["output"]["dir"] = run_dir;
    config = parse_train_config(j);
  } else {
    MINIDL_CHECK(!options.config_path.empty(), "train: --config FILE is required (or --resume RUN_DIR)");
    config = load_train_config(options.config_path, options.overrides, options.device, options.output_dir);
    run_dir = config.output_dir;
    MINIDL_CHECK(!fs::exists(run_dir + "/" + kCheckpoint), "output folder '", run_dir,
                 "' already holds a run: pass --resume ", run_dir, " to continue it, or choose another output.dir");
    fs::create_directories(run_dir);
  }

  const Device device = setup_compute(config);
  Trainer trainer(config, device);
  int64_t start_epoch = 0, step = 0;
  if (!options.resume_dir.empty()) {
    CheckpointInfo info = load_checkpoint(run_dir + "/" + kCheckpoint, trainer.model(), trainer.optimizer());
    start_epoch = info.epoch;
    step = info.step;
    truncate_jsonl(run_dir + "/metrics.jsonl", "epoch", start_epoch + 1);
    truncate_jsonl(run_dir + "/steps.jsonl", "step", step);
  } else {
    write_text_atomic(run_dir + "/config.json", trainer.resolved_config().dump(2) + "\n");
  }
  RunLog log(run_dir);

  int64_t params = 0;
  for (auto& kv : trainer.model().named_parameters()) params += kv.second.numel();
  log.line(str("minidl train: ", device.str(), ", ", params, " parameters, ", trainer.steps_per_epoch(),
               " steps/epoch of ", config.batch_size, ", ", config.epochs, " epochs, seed ", config.seed, ", ",
               config.deterministic ? "deterministic (same config and seed give the same bits)"
                                    : "NOT deterministic (cuDNN may pick non-deterministic algorithms)",
               device.is_cuda() ? (config.allow_tf32 ? ", TF32 convolutions" : ", fp32 convolutions") : "",
               ", run folder ", run_dir));
  if (start_epoch > 0) log.line(str("resumed after epoch ", start_epoch, " (step ", step, ")"));

  reset_peak_device_memory();
  // One record per step of an epoch, written by the GPU as the steps finish (pinned memory).
  const std::shared_ptr<void> record_memory =
      allocate_pinned(static_cast<size_t>(trainer.steps_per_epoch()) * sizeof(Trainer::StepRecord));
  auto* records = static_cast<Trainer::StepRecord*>(record_memory.get());
  double train_seconds = 0, last_test = 0, last_tta = -1;
  int64_t trained_images = 0;
  const int64_t steps_per_epoch = trainer.steps_per_epoch();
  bool stopped_early = false;     // --max-steps ended an epoch part-way (no checkpoint for it)
  bool stopped_at_limit = false;  // --max-steps reached: no further epoch starts
  for (int64_t epoch = start_epoch; epoch < config.epochs && !stopped_at_limit; ++epoch) {
    const bool profile_now = options.profile && epoch == start_epoch;
    // --profile: 5 warm-up and 20 measured steps (fewer in a short epoch) at the start of the run.
    std::unique_ptr<StepProfiler> profiler;
    if (profile_now) {
      const int64_t measure = std::max<int64_t>(1, std::min<int64_t>(20, (steps_per_epoch - 1) / 3));
      profiler = std::make_unique<StepProfiler>(device, std::min<int64_t>(5, measure), measure);
    }
    trainer.train_loader().start_epoch(epoch);
    int64_t done = 0;  // steps of this epoch so far
    const auto t0 = Clock::now();
    while (true) {
      if (options.max_steps > 0 && step >= options.max_steps) {
        stopped_early = done < steps_per_epoch;
        break;
      }
      if (step >= trainer.total_steps()) break;  // a fractional last epoch ends part-way
      if (profiler) profiler->before_step();
      if (!trainer.train_step(step, &records[done], profiler ? profiler->active() : nullptr)) break;
      if (profiler) profiler->after_step();
      ++done;
      ++step;
      log.progress(epoch + 1, config.epochs, done, steps_per_epoch, since(t0));
    }
    if (done == 0) break;
    // The epoch's records come to the host once, here (this is also the epoch's synchronization).
    synchronize(device);
    const double lr = trainer.lr_at(step - 1);
    if (epoch == start_epoch) log.line(str("training step: ", trainer.step_mode()));
    double loss_sum = 0;
    int64_t correct = 0;
    const int64_t first_step = step - done;
    for (int64_t i = 0; i < done; ++i) {
      const float loss = records[i].loss;
      log.step(first_step + i, epoch, loss);
      if (!std::isfinite(loss)) {
        log.line(str("error: the loss is ", loss, " at step ", first_step + i, " (epoch ",
                     epoch + 1, "); stopping. The last good checkpoint is ", run_dir, "/", kCheckpoint,
                     epoch > 0 ? str(" (after epoch ", epoch, ")") : std::string(" (none was written yet)")));
        return 3;
      }
      loss_sum += loss;
      correct += records[i].correct;
    }
    const int64_t seen = done * config.batch_size;
    const double epoch_seconds = since(t0);
    train_seconds += epoch_seconds;
    trained_images += seen;
    if (profiler) profiler->finish(log, run_dir);

    const auto e0 = Clock::now();
    const Trainer::EvalResult eval = trainer.evaluate(config.tta);
    last_test = eval.acc;
    last_tta = eval.tta_acc;
    const double eval_seconds = since(e0);
    nlohmann::json record = {{"epoch", epoch + 1},
                             {"step", step},
                             {"train_loss", loss_sum / static_cast<double>(done)},
                             {"train_acc", 100.0 * static_cast<double>(correct) / static_cast<double>(seen)},
                             {"test_acc", last_test},
                             {"lr", lr},
                             {"seconds", epoch_seconds},
                             {"eval_seconds", eval_seconds},
                             {"images_per_s", static_cast<double>(seen) / epoch_seconds}};
    if (last_tta >= 0) record["test_acc_tta"] = last_tta;
    log.metrics(record);
    log.line(str("epoch ", epoch + 1, "/", config.epochs, "  loss ", fixed(record["train_loss"], 4), "  train ",
                 fixed(record["train_acc"], 2), "%  test ", fixed(last_test, 2), "%",
                 last_tta >= 0 ? str("  test+", config.tta, " ", fixed(last_tta, 2), "%") : std::string(),
                 "  lr ", fixed(lr, 4), "  ", fixed(epoch_seconds, 1), "s (", fixed(record["images_per_s"], 0),
                 " img/s)  eval ", fixed(eval_seconds, 1), "s"));
    if (options.max_steps > 0 && step >= options.max_steps) stopped_at_limit = true;
    if (!stopped_early) {
      CheckpointInfo info;
      info.epoch = epoch + 1;
      info.step = step;
      info.config = trainer.resolved_config();
      save_checkpoint(run_dir + "/" + kCheckpoint, trainer.model(), trainer.optimizer(), info);
    }
    save_safetensors(run_dir + "/" + kWeights, trainer.model().state_dict(), {{"format", "pt"}});
  }

  const DeviceMemoryStats mem = device_memory_stats();
  nlohmann::json summary = {{"test_acc", last_test},
                            {"train_seconds", train_seconds},
                            {"images_per_s", train_seconds > 0 ? trained_images / train_seconds : 0.0},
                            {"steps", step},
                            {"device", device.str()},
                            {"deterministic", config.deterministic},
                            {"peak_device_bytes", mem.peak_bytes}};
  if (last_tta >= 0) summary["test_acc_tta"] = last_tta;
  write_text_atomic(run_dir + "/summary.json", summary.dump(2) + "\n");
  log.line(str("done: test ", fixed(last_test, 2), "%",
               last_tta >= 0 ? str(" (", config.tta, " TTA ", fixed(last_tta, 2), "%)") : std::string(), ", ", step,
               " steps, training ", fixed(train_seconds, 1), "s",
               start_epoch < config.epochs ? str(" (", fixed(train_seconds / std::max(1.0, config.epochs - start_epoch), 1),
                                                 "s/epoch)") : std::string(),
               ", ", fixed(summary["images_per_s"], 0), " img/s",
               device.is_cuda() ? str(", peak device memory ", fixed(mem.peak_bytes / 1e9, 2), " GB") : std::string(),
               stopped_at_limit ? str(" [stopped at --max-steps ", options.max_steps, "]") : std::string()));
  return 0;
}

}  // namespace minidl
