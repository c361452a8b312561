#include "train/run.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <sstream>

#include "core/allocator.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/safetensors.h"
#include "core/test_hooks.h"
#include "distributed/communicator.h"
#include "distributed/launch.h"
#include "train/checkpoint_writer.h"
#include "train/class_metrics.h"
#include "train/resume.h"
#include "train/run_folder.h"
#include "train/run_log.h"
#include "train/stop_signal.h"
#include "train/text_format.h"

namespace minidl {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

// A language model's evaluation as the log says it: val.bin's loss, perplexity and token accuracy.
std::string token_scores(const Trainer::EvalResult& r) {
  return str("val.bin loss ", fixed(r.loss, 4), " (perplexity ", fixed(std::exp(r.loss), 2), ", tokens ",
             fixed(r.acc, 2), "% right)");
}

constexpr const char* kWeights = "model.safetensors";
// On a GPU the steps' losses are read (a wait for the device) every this many steps.
constexpr int64_t kGpuLossReadSteps = 32;

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// A library caller catches minidl::Error: an exception of another kind from the libraries beneath
// (std::filesystem, nlohmann::json) leaves a Run as one, with its message. Called in a handler.
[[noreturn]] void throw_as_error(const std::exception& e) {
  if (dynamic_cast<const Error*>(&e)) throw;
  throw Error(e.what());
}

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Every rank's `value`, all-gathered (rank order). Rank 0 alone speaks for the job: it ends it,
// naming the first rank whose value differs from its own with `says(rank, its value, rank 0's)`.
void check_ranks_agree(Communicator& comm, Device device, uint64_t value,
                       const std::function<std::string(int, uint64_t, uint64_t)>& says) {
  if (comm.world_size() == 1) return;
  const Tensor mine = Tensor::from_vector(
      std::vector<int32_t>{static_cast<int32_t>(value & 0xffffffffu), static_cast<int32_t>(value >> 32)}, {2}, device);
  Tensor all = Tensor::empty({2 * comm.world_size()}, DType::Int32, device);
  comm.all_gather(mine, all);
  const std::vector<int32_t> v = all.to(Device::cpu()).values<int32_t>();
  if (comm.rank() != 0) return;
  const auto at = [&](int r) {
    return static_cast<uint64_t>(static_cast<uint32_t>(v[2 * r])) |
           static_cast<uint64_t>(static_cast<uint32_t>(v[2 * r + 1])) << 32;
  };
  for (int r = 1; r < comm.world_size(); ++r) MINIDL_CHECK(at(r) == at(0), says(r, at(r), at(0)));
}

std::string crc_text(uint64_t crc) { return crc_hex(static_cast<uint32_t>(crc)); }

// Every rank must train the same model the same way from the same place: ranks started with
// different configs (a --set on one of them), other data (a CIFAR10_DIR or node-local image
// folder of their own), another start (one resumes, another starts fresh) or other options that
// change the run (--max-steps) would each apply the averaged gradients to weights of their own and
// drift apart, or wait for each other in different collectives; rank 0 would save its own. One
// all-gather per thing finds that before the first step. Where the run folder is and whether
// progress shows may differ.
void check_same_run(Communicator& comm, Device device, const nlohmann::json& resolved, uint32_t data_crc,
                    const RunOptions& options, int64_t start) {
  if (comm.world_size() == 1) return;
  const std::string n = std::to_string(comm.world_size());
  nlohmann::json j = resolved;
  j.erase("output");
  check_ranks_agree(comm, device, std::hash<std::string>{}(j.dump()), [&](int r, uint64_t, uint64_t) {
    return str("rank ", r, " of ", n, " was started with another config than rank 0 (their resolved configs ",
               "differ): every rank needs the same --config and --set");
  });
  check_ranks_agree(comm, device, data_crc, [&](int r, uint64_t theirs, uint64_t ours) {
    return str("rank ", r, " of ", n, " loaded other training data than rank 0 (CRC-32 ", crc_text(theirs),
               ", rank 0's ", crc_text(ours), "): every rank needs the same data (data.dir, CIFAR10_DIR, the ",
               "image folder on each node)");
  });
  // The step a rank starts at, + 1 (0: a fresh run).
  const auto start_text = [](uint64_t v) {
    return v == 0 ? std::string("as a fresh run") : str("from a checkpoint at step ", v - 1);
  };
  check_ranks_agree(comm, device, static_cast<uint64_t>(start), [&](int r, uint64_t theirs, uint64_t ours) {
    return str("rank ", r, " of ", n, " starts ", start_text(theirs), ", rank 0 ", start_text(ours),
               ": every rank needs the same --resume RUN_DIR (or none)");
  });
  check_ranks_agree(comm, device, static_cast<uint64_t>(options.max_steps), [&](int r, uint64_t theirs, uint64_t ours) {
    return str("rank ", r, " of ", n, " was started with --max-steps ", theirs, ", rank 0 with ", ours,
               " (0: none): every rank needs the same --max-steps");
  });
  check_ranks_agree(comm, device, options.profile ? 1 : 0, [&](int r, uint64_t theirs, uint64_t) {
    return str("rank ", r, " of ", n, theirs ? " was" : " was not", " started with --profile and rank 0 ",
               theirs ? "was not" : "was", ": every rank needs the same options");
  });
}

// Before the first step every rank holds the same weights and optimizer state (the same seed, or
// the same checkpoint, which each rank loads itself): ranks that do not would average the
// gradients of different models.
void check_same_state(Communicator& comm, Device device, Trainer& trainer) {
  if (comm.world_size() == 1) return;
  std::vector<std::pair<std::string, Tensor>> host = checkpoint_tensors(trainer.model(), trainer.optimizer());
  for (auto& entry : host) entry.second = entry.second.cpu();
  const std::string n = std::to_string(comm.world_size());
  check_ranks_agree(comm, device, std::stoull(tensors_crc32(host), nullptr, 16),
                    [&](int r, uint64_t theirs, uint64_t ours) {
                      return str("rank ", r, " of ", n, " holds other weights than rank 0 before the first step ",
                                 "(CRC-32 ", crc_text(theirs), " of its model and optimizer state, rank 0's ",
                                 crc_text(ours), "): every rank needs the same checkpoint, or the same seed");
                    });
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

// Rank 0's yes or no, on every rank (rank 0 alone evaluates, so it alone decides).
bool rank0_decides(Communicator& comm, Device device, bool mine) {
  if (comm.world_size() == 1) return mine;
  const Tensor t = Tensor::from_vector(std::vector<int32_t>{mine ? 1 : 0}, {1}, device);
  Tensor all = Tensor::empty({comm.world_size()}, DType::Int32, device);
  comm.all_gather(t, all);
  return all.to(Device::cpu()).values<int32_t>()[0] != 0;
}

constexpr const char* kBestWeights = "best.safetensors";

}  // namespace

// The epoch in progress: where this process entered it, how many of its step records are read,
// and its sums so far (those of the checkpoint it resumed inside, then its own steps').
struct Run::Epoch {
  int64_t index = 0;
  int64_t first_step = 0;
  int64_t flushed = 0;
  CheckpointInfo sums;
  int64_t entry_seen = 0;  // sums.epoch_seen when this process entered the epoch
  Clock::time_point t0 = Clock::now();
};

Run::Run(const RunOptions& options) try : options_(options) {
  MINIDL_CHECK(options.max_steps >= 0, "--max-steps: must be >= 0 (0: no limit), got ", options.max_steps);
  MINIDL_CHECK(!options.restart || !options.resume_dir.empty(), "--restart: only with --resume RUN_DIR (it starts ",
               "that run again from its config.json)");
  resume_ = !options.resume_dir.empty() && !options.restart;
  const Launch launch = detect_launch();
  if (resume_) {
    run_dir_ = options.resume_dir;
    start_ = read_resume_checkpoint(run_dir_);
    config_ = resume_config(options, start_, run_dir_, &epochs_raised_);
  } else if (options.restart) {
    run_dir_ = options.resume_dir;
    config_ = restart_config(options, run_dir_);
  } else {
    MINIDL_CHECK(!options.config_path.empty(), "train: --config FILE is required (or --resume RUN_DIR)");
    config_ = load_train_config(options.config_path, options.overrides, options.device, options.output_dir);
    run_dir_ = config_.output_dir;
  }
  in_folder_ = true;
  signals_ = std::make_unique<StopSignals>();

  // The rank's GPU is chosen before CUDA starts. Rank 0 alone writes the run folder; every rank
  // reads the checkpoint it resumes from.
  select_local_gpu(launch);
  device_ = setup_compute(config_);
  comm_ = make_communicator(options.dist, launch, device_, options.dist_timeout);
  // From here on an error may be this rank's alone (rank 0 alone checks and writes the run
  // folder): in a world of several ranks it ends the job at once.
  try {
    // Rank 0 alone writes checkpoints, so only it can say that the last one is on disk.
    Communicator::TimeoutReport report;
    report.where = [this] {
      if (!writer()) return str("at step ", step_);
      return str("at step ", step_,
                 checkpointed_step_ >= 0 ? str("; the last checkpoint, step ", checkpointed_step_, ", is intact")
                                         : std::string("; no checkpoint was written yet"));
    };
    report.record = [this](const std::string& message) {
      if (log_) log_->error(message);
    };
    comm_->set_timeout_report(std::move(report));
    trainer_ = std::make_unique<Trainer>(config_, device_,
                                         resume_ ? Trainer::Weights::FromCheckpoint : Trainer::Weights::FromConfig);
    trainer_->set_communicator(comm_);
    check_same_run(*comm_, device_, trainer_->resolved_config(),
                   comm_->world_size() > 1 ? trainer_->training_data_crc32() : 0, options,
                   resume_ ? start_.step + 1 : 0);
    selection_ = std::make_unique<ModelSelection>(config_);
    selection_->check_data(trainer_->has_validation());
    MINIDL_CHECK(!options.profile || options.profiler,
                 "--profile: the run was given no profiler (RunOptions::profiler)");
    MINIDL_CHECK(!options.profile || trainer_->data_parallel().micro_batches() == 1,
                 "--profile times steps of one micro-batch; this ", "run has ",
                 trainer_->data_parallel().micro_batches(), " (world size x accumulate_steps): profile with ",
                 "accumulate_steps 1 on one process");
    // The folder checks need the resolved config (a fresh run may reuse a folder whose run had the
    // same one) and the steps per epoch (the resume position).
    if (resume_) {
      selection_->load_state(start_.selection,
                             str("checkpoint '", run_dir_, "/", kCheckpointFile, "': metadata 'selection'"));
      MINIDL_CHECK(!selection_->stopped(), "--resume ", run_dir_,
                   ": the run is finished: it stopped early after epoch ", start_.epoch, " (",
                   selection_->stop_reason(), ")");
      check_resume_position(start_, trainer_->steps_per_epoch(), trainer_->total_steps(), config_.batch_size, run_dir_,
                            config_.epochs, !options.overrides.empty());
      check_micro_batches(start_, trainer_->data_parallel().micro_batches(), comm_->world_size(),
                          trainer_->data_parallel().sync_norm_layers(), run_dir_);
      check_resume_data(start_, trainer_->training_data_crc32(), trainer_->train_size(), run_dir_);
    } else if (writer()) {
      check_fresh_run_folder(run_dir_, options.overwrite, trainer_->resolved_config(), options.restart);
    }
  } catch (const std::exception& e) {
    comm_->end_job_after_error(e.what());
    throw;
  }
} catch (const std::exception& e) {
  throw_as_error(e);
}

Run::Run(const TrainConfig& config, Device device, Dataset train_set, Dataset test_set, int64_t max_steps) try
    : config_(resolve_for_device(config, device)), device_(device), comm_(make_single_process_communicator()) {
  options_.max_steps = max_steps;
  trainer_ = std::make_unique<Trainer>(config_, device_, std::move(train_set), std::move(test_set));
  selection_ = std::make_unique<ModelSelection>(config_);
} catch (const std::exception& e) {
  throw_as_error(e);
}

Run::~Run() = default;

bool Run::writer() const { return comm_->rank() == 0; }

void Run::set_communicator(std::shared_ptr<Communicator> comm) {
  trainer_->set_communicator(comm);
  comm_ = std::move(comm);
}

std::vector<std::string> Run::take_folder() {
  const std::string ckpt = run_dir_ + "/" + kCheckpointFile;
  if (!resume_ && writer()) create_run_folder(run_dir_);
  test_pause_point("BEFORE_LOCK");
  if (writer()) lock_ = std::make_unique<RunFolderLock>(run_dir_);
  // Every check again, under the lock: another run may have started, resumed or finished in the
  // folder since they were made.
  std::vector<std::string> replaced;
  if (resume_) {
    // Loaded into memory only: a refused checkpoint still changes nothing on disk.
    const CheckpointInfo now = load_checkpoint(ckpt, trainer_->model(), trainer_->optimizer());
    MINIDL_CHECK(same_position(now, start_), "--resume ", run_dir_, ": its checkpoint changed while this command was ",
                 "starting (another minidl process trained there; it is now at step ", now.step,
                 "): run the command again");
    trainer_->load_grad_scaler_state(now.grad_scaler, ckpt);
  }
  if (!writer()) return replaced;
  if (resume_) {
    check_jsonl(run_dir_ + "/metrics.jsonl", "epoch", start_.epoch + 1, 1);
    check_jsonl(run_dir_ + "/steps.jsonl", "step", start_.step, 0);
    truncate_jsonl(run_dir_ + "/metrics.jsonl", "epoch", start_.epoch + 1, 1);
    truncate_jsonl(run_dir_ + "/steps.jsonl", "step", start_.step, 0);
    // The evaluations at steps up to the checkpoint's stay (a torn last one is dropped: they are
    // read, never resumed from).
    truncate_jsonl(run_dir_ + "/evals.jsonl", "step", start_.step + 1, start_.step + 1);
    if (trainer_->resolved_config() != start_.config)  // --set epochs or accumulate_steps
      write_file_atomic(run_dir_ + "/config.json", trainer_->resolved_config().dump(2) + "\n", "run config");
  } else {
    if (check_fresh_run_folder(run_dir_, options_.overwrite, trainer_->resolved_config(), options_.restart) ==
        FreshFolder::Replace)
      replaced = remove_run_files(run_dir_);
    write_file_atomic(run_dir_ + "/config.json", trainer_->resolved_config().dump(2) + "\n", "run config");
    write_file_atomic(run_dir_ + "/classes.json", nlohmann::json(trainer_->classes()).dump() + "\n", "class list");
  }
  return replaced;
}

void Run::log_start(const std::vector<std::string>& replaced, const std::vector<std::string>& stale) {
  if (!replaced.empty())
    log_->line(str(options_.overwrite ? "--overwrite" : "a run stopped before its first checkpoint",
                   ": removed the earlier run's ", join(replaced)));
  if (!stale.empty()) log_->line(str("removed temporary files left by killed runs: ", join(stale)));
  int64_t params = 0;
  for (auto& kv : trainer_->model().named_parameters()) params += kv.second.numel();
  const TrainConfig& c = config_;
  log_->line(str("minidl train: ", device_.str(), ", ", params, " parameters, ", trainer_->steps_per_epoch(),
                 " steps/epoch of ", c.batch_size, ", ", c.epochs, " epochs, seed ", c.seed, ", ",
                 c.deterministic ? "deterministic (same config and seed give the same bits)"
                                 : "NOT deterministic (cuDNN may pick non-deterministic algorithms)",
                 ", ", to_string(*c.precision), " ", to_string(*c.memory_format),
                 device_.is_cuda() && c.precision == Precision::Fp32
                     ? (c.allow_tf32 ? ", TF32 convolutions" : ", fp32 convolutions")
                     : "",
                 ", run folder ", run_dir_));
  if (trainer_->data_parallel().micro_batches() > 1)
    log_->line(str("data parallel: world size ", comm_->world_size(), " (", comm_->backend(), "), ", c.accumulate_steps,
                   " micro-batch", c.accumulate_steps > 1 ? "es" : "", " of ",
                   c.batch_size / trainer_->data_parallel().micro_batches(), " per rank per step, gradients summed in ",
                   "micro-batch order",
                   trainer_->data_parallel().sync_norm_layers() > 0 && comm_->world_size() > 1
                       ? str(", ", trainer_->data_parallel().sync_norm_layers(),
                             " BatchNorm2d layers synchronized over the ", comm_->world_size(), " ranks")
                       : ""));
  for (const std::string& note : trainer_->data_notes())
    if (!note.empty()) log_->line("data: " + note);
  if (const std::string w = trainer_->schedule_warning(); !w.empty()) log_->line("warning: " + w);
  for (const std::string& line : trainer_->init_from_lines()) log_->line(line);
  const int64_t spe = trainer_->steps_per_epoch();
  const int64_t resumed_in_epoch = start_.step - start_.epoch * spe;
  if (resume_)
    log_->line(str("resumed at step ", start_.step, " (", start_.epoch, " epochs done",
                   resumed_in_epoch == spe ? str(" and epoch ", start_.epoch + 1, "'s steps; its evaluation runs again")
                   : resumed_in_epoch > 0 ? str(" and ", resumed_in_epoch, " steps of epoch ", start_.epoch + 1) : "",
                   ")", epochs_raised_ ? str("; epochs raised to ", c.epochs) : std::string()));
}

void Run::start_epoch(int64_t epoch) {
  if (!records_) {
    record_memory_ = allocate_pinned(static_cast<size_t>(trainer_->steps_per_epoch()) * sizeof(Trainer::StepRecord));
    records_ = static_cast<Trainer::StepRecord*>(record_memory_.get());
  }
  trainer_->train_loader().start_epoch(epoch);
  epoch_ = epoch;
}

void Run::step(StepObserver* observer) {
  const int64_t spe = trainer_->steps_per_epoch();
  if (epoch_ < 0 || step_ - epoch_ * spe >= spe) start_epoch(step_ / spe);
  MINIDL_CHECK(trainer_->train_step(step_, &records_[step_ - epoch_ * spe], observer),
               "the training set gives no batch for step ", step_);
  ++step_;
}

bool Run::flush(Epoch& e) {
  synchronize(device_);
  for (; e.first_step + e.flushed < step_; ++e.flushed) {
    const int64_t s = e.first_step + e.flushed;
    const float loss = records_[s - e.index * trainer_->steps_per_epoch()].loss;
    log_->step(s, e.index, loss);
    if (!std::isfinite(loss)) {
      // The message names a checkpoint complete on disk; a failed write is reported after it.
      std::exception_ptr write_error;
      try {
        wait_for_checkpoint();
      } catch (...) {
        write_error = std::current_exception();
      }
      log_->fatal(str("error: the loss is ", std::isnan(loss) ? "NaN" : loss > 0 ? "+inf" : "-inf", " at step ", s,
                     " (epoch ", e.index + 1, "); stopping. ",
                     saved_step_ >= 0
                         ? str("The last good checkpoint is ", run_dir_, "/", kCheckpointFile, " (at step ",
                               saved_step_, ")")
                         : std::string("No checkpoint was written yet")));
      if (write_error) std::rethrow_exception(write_error);
      return false;
    }
    running_loss_.add(loss);
    e.sums.epoch_loss_sum += loss;
    e.sums.epoch_correct += records_[s - e.index * trainer_->steps_per_epoch()].correct;
    e.sums.epoch_seen += config_.batch_size;
  }
  return true;
}

CheckpointInfo Run::position(const Epoch& e, bool evaluated) const {
  CheckpointInfo info = e.sums;
  info.epoch = e.index;
  info.step = step_;
  info.epoch_seconds += since(e.t0);
  info.evaluated = evaluated;
  info.selection = selection_->state();
  return info;
}

void Run::checkpoint(CheckpointInfo info, bool with_weights) {
  log_->end_progress();  // steps.jsonl holds every step the checkpoint has trained
  if (writer()) {
    info.world_size = comm_->world_size();
    info.config = trainer_->resolved_config();
    info.grad_scaler = trainer_->grad_scaler_state();
    info.classes = trainer_->classes();
    info.data_crc32 = crc_hex(trainer_->training_data_crc32());
    wait_for_checkpoint();
    checkpoint_writer_->write(run_dir_, trainer_->model(), trainer_->optimizer(), info, checkpointed_step_,
                              config_.checkpoint_keep, with_weights ? run_dir_ + "/" + kWeights : std::string());
  }
  checkpointed_step_ = info.step;
  checkpointed_at_ = Clock::now();
}

void Run::wait_for_checkpoint() {
  if (checkpoint_writer_) checkpoint_writer_->wait();
  saved_step_ = checkpointed_step_;
}

int Run::stopped_by(int sig, Epoch& e) {
  if (!flush(e)) return 3;
  std::string saved = step_ == 0 ? std::string("no step was trained, nothing to save")
                                 : str("the checkpoint at step ", step_, " is current");
  if (step_ > 0 && step_ != checkpointed_step_) {
    checkpoint(position(e, false));
    saved = str("wrote ", run_dir_, "/", kCheckpointFile, " at step ", step_);
  }
  wait_for_checkpoint();
  const int64_t spe = trainer_->steps_per_epoch();
  log_->line(str("stopped by ", signal_name(sig), " after step ", step_, " (epoch ", e.index + 1, ", step ",
                 step_ - e.index * spe, " of ", spe, "): ", saved, "; continue with: minidl train --resume ", run_dir_));
  return 128 + sig;
}

bool Run::end_epoch(Epoch& e) {
  const int64_t spe = trainer_->steps_per_epoch();
  const int64_t epoch_steps = step_ - e.index * spe;
  if (!flush(e)) return false;
  const double lr = trainer_->lr_at(step_ - 1);
  if (e.index == start_.epoch) log_->line(str("training step: ", trainer_->step_mode()));
  const double epoch_seconds = e.sums.epoch_seconds + since(e.t0);
  train_seconds_ += since(e.t0);
  trained_images_ += e.sums.epoch_seen - e.entry_seen;
  if (profiler_) {
    profiler_->finish(*log_, run_dir_, std::nullopt);
    profiler_.reset();
  }
  // The checkpoint comes before the evaluation: a run killed while evaluating loses no
  // training, and evaluates this epoch again when resumed. The epoch's weights (model.safetensors)
  // are written from the same snapshot, in the background like the checkpoint; a resumed run that
  // ends an epoch without a new checkpoint (it was written before the evaluation) writes them itself.
  const CheckpointInfo before_eval = position(e, false);
  const bool weights_with_checkpoint = step_ != checkpointed_step_;
  if (weights_with_checkpoint) checkpoint(before_eval, true);

  test_kill_point("eval", e.index + 1);
  // With a validation split every epoch is evaluated on it, and the test split once, where the run
  // ends (Lightning's validate-then-test); without one, on the test split.
  const bool validating = trainer_->has_validation();
  const auto e0 = Clock::now();
  const Trainer::EvalResult eval = evaluate(validating ? Split::Val : Split::Test);
  const double eval_seconds = since(e0);
  const double seen = static_cast<double>(e.sums.epoch_seen);
  const bool tokens = trainer_->sample_kind() == SampleKind::Tokens;
  const bool volumes = trainer_->sample_kind() == SampleKind::Volumes;
  nlohmann::json record = {{"epoch", e.index + 1},
                           {"step", step_},
                           {"train_loss", e.sums.epoch_loss_sum / static_cast<double>(epoch_steps)},
                           {"train_acc", 100.0 * static_cast<double>(e.sums.epoch_correct) /
                                             (seen * static_cast<double>(trainer_->outputs_per_sample()))},
                           {"lr", lr},
                           {"seconds", epoch_seconds},
                           {"eval_seconds", eval_seconds},
                           {"images_per_s", seen / epoch_seconds}};
  if (tokens) record["tokens_per_s"] = seen * static_cast<double>(trainer_->outputs_per_sample()) / epoch_seconds;
  const std::string tta = to_string(config_.tta);
  std::string scores;
  if (validating) {
    last_val_eval_ = eval;
    record["val_acc"] = eval.acc;
    record["val_loss"] = eval.loss;
    if (eval.tta_acc >= 0) record["val_acc_tta"] = eval.tta_acc;
    scores = str("val ", fixed(eval.acc, 2), "% (loss ", fixed(eval.loss, 4), ")",
                 eval.tta_acc >= 0 ? str("  val+", tta, " ", fixed(eval.tta_acc, 2), "%") : "");
  } else {
    last_test_eval_ = eval;
    last_test_ = eval.acc;
    last_tta_ = eval.tta_acc;
    record["test_acc"] = last_test_;
    if (last_tta_ >= 0) record["test_acc_tta"] = last_tta_;
    scores = str("test ", fixed(last_test_, 2), "%",
                 last_tta_ >= 0 ? str("  test+", tta, " ", fixed(last_tta_, 2), "%") : "");
    // A language model is judged by its held-out loss (val.bin's) and perplexity.
    if (tokens) {
      record["test_loss"] = eval.loss;
      scores = token_scores(eval);
    }
    // A segmentation is judged by its Dice over the test volumes' voxels.
    if (volumes) {
      record["test_dice"] = eval.dice;
      record["test_class_dice"] = class_dice_json(eval.class_dice);
      record["test_loss"] = eval.loss;
      scores = str("test Dice ", fixed(eval.dice, 4), " (", class_dice_text(eval.class_dice), "; voxels ",
                   fixed(last_test_, 2), "% right)");
      reach_target(eval.dice);
    }
  }
  if (const GradScaler* scaler = trainer_->grad_scaler()) {
    record["loss_scale"] = scaler->scale();
    record["skipped_steps"] = scaler->skipped_steps();
  }
  // Model selection sees the evaluations an uninterrupted run makes: at epoch ends and at the run's
  // last step (not where --max-steps stops a run inside an epoch, which a resume goes on from).
  const bool new_best = (epoch_steps == spe || step_ >= trainer_->total_steps()) && select(record, e.index + 1);
  const bool run_ends = stopped_at_limit_ || stopped_early_ || target_reached_ || step_ >= trainer_->total_steps();
  if (run_ends && validating) {
    const Trainer::EvalResult test = evaluate(Split::Test);
    last_test_eval_ = test;
    last_test_ = test.acc;
    last_tta_ = test.tta_acc;
    record["test_acc"] = last_test_;
    if (last_tta_ >= 0) record["test_acc_tta"] = last_tta_;
    scores += str("  test ", fixed(last_test_, 2), "%",
                  last_tta_ >= 0 ? str("  test+", tta, " ", fixed(last_tta_, 2), "%") : "");
  }
  log_->metrics(record);
  const double left = eta_ ? eta_->seconds_left(step_) : -1;
  log_->line(str("epoch ", e.index + 1, "/", config_.epochs, "  loss ", fixed(record["train_loss"], 4), "  train ",
                 fixed(record["train_acc"], 2), "%  ", scores, "  lr ", fixed(lr, 4), "  ", fixed(epoch_seconds, 1),
                 "s (", tokens ? str(fixed(record["tokens_per_s"], 0), " tok/s") : str(fixed(record["images_per_s"], 0), " img/s"),
                 ")  eval ", fixed(eval_seconds, 1), "s",
                 new_best ? str("  best ", to_string(selection_->best().metric), ": ", kBestWeights) : std::string(),
                 !run_ends && left >= 0 ? str("  ETA ", duration_text(left)) : std::string()));
  if (stopped_early_)
    log_->line(str(selection_->stop_reason(), "; the run ends after epoch ", e.index + 1, " of ", config_.epochs));
  if (target_reached_)
    log_->line(str("target reached: test Dice ", fixed(last_test_eval_->dice, 4), " >= eval.target_dice ",
                   config_.target_dice, " after epoch ", e.index + 1, ", ", step_, " steps, ",
                   fixed(time_to_target_, 1), "s of training (evaluation excluded); the run ends"));
  if (writer() && !weights_with_checkpoint)
    save_weights(run_dir_ + "/" + kWeights, trainer_->model());
  // Where the run ends, the checkpoint records that the evaluation is logged, so a resume does
  // not evaluate again (a finished run is refused; --max-steps or more epochs go on).
  if (run_ends) {
    CheckpointInfo after_eval = before_eval;
    if (epoch_steps == spe) {
      after_eval = CheckpointInfo{};
      after_eval.epoch = e.index + 1;
      after_eval.step = step_;
    } else {
      after_eval.evaluated = true;
    }
    after_eval.selection = selection_->state();
    checkpoint(after_eval);
    if (validating) evaluate_best();
  }
  return true;
}

void Run::evaluate_best() {
  if (!writer() || !selection_->save_best() || !selection_->best().seen) return;
  if (selection_->best().best_step == step_) {
    best_test_eval_ = last_test_eval_;
    return;
  }
  // The checkpoint above took its snapshot already: the model may change until it is restored.
  Module& model = trainer_->model();
  std::vector<std::pair<std::string, Tensor>> final_weights;
  for (const auto& [name, t] : model.state_dict()) final_weights.emplace_back(name, t.clone());
  const std::string best_path = run_dir_ + "/" + kBestWeights;
  const SafeTensors best_weights = load_safetensors(best_path);
  check_weights(best_weights, best_path);
  model.load_state_dict(best_weights.tensors);
  best_test_eval_ = evaluate(Split::Test);
  model.load_state_dict(final_weights);
  const MetricWatch& b = selection_->best();
  log_->line(str("best weights (", kBestWeights, ", epoch ", b.best_epoch, ", ", to_string(b.metric), " ",
                 fixed(b.best, 4), "): test ", fixed(best_test_eval_->acc, 2), "%",
                 best_test_eval_->tta_acc >= 0 ? str("  test+", to_string(config_.tta), " ", fixed(best_test_eval_->tta_acc, 2), "%")
                                               : std::string()));
}

void Run::evaluate_within_epoch(Epoch& e) {
  const Split split = trainer_->has_validation() ? Split::Val : Split::Test;
  const auto t0 = Clock::now();
  const Trainer::EvalResult r = evaluate(split);
  // The epoch's clock skips the evaluation: its seconds and throughput are the training's.
  e.t0 += Clock::now() - t0;
  if (!writer()) return;
  const std::string name = split_name(split);
  nlohmann::json record = {{"step", step_},
                           {"epoch", e.index + 1},
                           {name + "_loss", r.loss},
                           {name + "_acc", r.acc},
                           {"eval_seconds", since(t0)}};
  if (trainer_->sample_kind() == SampleKind::Volumes) {
    record[name + "_dice"] = r.dice;
    log_->eval(record);
    log_->line(str("step ", step_, ": ", name, " Dice ", fixed(r.dice, 4), " (", class_dice_text(r.class_dice),
                   "; voxels ", fixed(r.acc, 2), "% right)"));
    return;
  }
  log_->eval(record);
  log_->line(trainer_->sample_kind() == SampleKind::Tokens && split == Split::Test
                 ? str("step ", step_, ": ", token_scores(r))
                 : str("step ", step_, ": ", name, " ", fixed(r.acc, 2), "% (loss ", fixed(r.loss, 4), ")"));
}

Trainer::EvalResult Run::evaluate(Split split) {
  // Every rank holds the same weights, so rank 0's result is every rank's; the others, which print
  // nothing, skip the pass.
  if (!writer()) return Trainer::EvalResult();
  const auto t0 = Clock::now();
  const std::string label = str("eval ", split_name(split));
  Trainer::EvalProgress progress;
  if (log_->interactive())
    progress = [&](int64_t done, int64_t total) { log_->progress(label, done, total, since(t0), ""); };
  Trainer::EvalResult r = trainer_->evaluate(config_.tta, split, progress);
  log_->end_progress();
  if (eta_) eta_->eval_done(since(t0));
  return r;
}

void Run::reach_target(double dice) {
  if (config_.target_dice <= 0 || target_reached_) return;
  // Rank 0 evaluated; every rank stops with it.
  target_reached_ = rank0_decides(*comm_, device_, dice >= config_.target_dice);
  if (target_reached_) time_to_target_ = train_seconds_;
}

nlohmann::json Run::class_dice_json(const std::vector<double>& dice) const {
  nlohmann::json j = nlohmann::json::object();
  const std::vector<std::string>& names = trainer_->classes();
  for (size_t c = 0; c < dice.size(); ++c)
    j[names[c]] = std::isnan(dice[c]) ? nlohmann::json() : nlohmann::json(dice[c]);
  return j;
}

std::string Run::class_dice_text(const std::vector<double>& dice) const {
  std::string text;
  const std::vector<std::string>& names = trainer_->classes();
  for (size_t c = 1; c < dice.size(); ++c)
    text += str(c > 1 ? ", " : "", names[c], " ", std::isnan(dice[c]) ? std::string("-") : fixed(dice[c], 3));
  return text;
}

bool Run::select(const nlohmann::json& record, int64_t epoch) {
  if (!selection_->save_best() && !selection_->early_stopping()) return false;
  const ModelSelection::Decision d = selection_->update(record, epoch, step_);
  if (d.new_best && writer()) {
    nlohmann::json meta = selection_->best_record();
    std::map<std::string, std::string> metadata;
    for (auto& [key, value] : meta.items()) metadata[key] = value.is_string() ? value.get<std::string>() : value.dump();
    save_weights(run_dir_ + "/" + kBestWeights, trainer_->model(), metadata);
  }
  stopped_early_ = rank0_decides(*comm_, device_, d.stop);
  return d.new_best;
}

void Run::show_progress(const Epoch& e) {
  if (!log_->interactive()) return;
  const int64_t spe = trainer_->steps_per_epoch();
  const double seconds = since(e.t0);
  const double images = static_cast<double>((step_ - e.first_step) * config_.batch_size);
  log_->progress(str("epoch ", e.index + 1, "/", config_.epochs), step_ - e.index * spe, spe, seconds,
                 progress_detail(running_loss_, seconds > 0 ? images / seconds : 0, trainer_->lr_at(step_ - 1),
                                 eta_->seconds_left(step_)));
}

int64_t Run::steps_to_run() const {
  return options_.max_steps > 0 ? std::min(options_.max_steps, trainer_->total_steps()) : trainer_->total_steps();
}

RunResult Run::execute() try {
  if (!in_folder_) {
    // No folder: the steps alone, then one evaluation.
    const int64_t total = steps_to_run();
    const auto t0 = Clock::now();
    while (step_ < total) step();
    const double seconds = since(t0);
    const Trainer::EvalResult eval = trainer_->evaluate(config_.tta);  // ends with a synchronizing copy
    RunResult r;
    r.steps = step_;
    r.test_acc = eval.acc;
    r.tta_acc = eval.tta_acc;
    r.train_seconds = seconds;
    return r;
  }
  MINIDL_CHECK(!executed_, "Run::execute: this run has been executed already; a Run trains once (make another Run, ",
               "with --resume to continue it)");
  executed_ = true;
  if (const int sig = StopSignals::received()) {
    std::cerr << "minidl: stopped by " << signal_name(sig) << " before the run started; nothing was written" << std::endl;
    return ended(128 + sig);
  }
  // Any error from here on may be this rank's alone (rank 0 alone creates, locks and checks the
  // folder and writes the logs): it ends the job at once, with its message. Once the log exists it
  // is written to log.txt as well as the terminal.
  try {
    // The folder is locked before anything in it changes.
    const std::vector<std::string> replaced = take_folder();
    check_same_state(*comm_, device_, *trainer_);
    const std::vector<std::string> stale =
        writer() ? remove_stale_temp_files(run_dir_, is_run_file) : std::vector<std::string>();
    log_ = std::make_unique<RunLog>(run_dir_, writer());
    if (config_.tensorboard) log_->enable_tensorboard(start_.step);
    if (writer()) checkpoint_writer_ = std::make_unique<CheckpointWriter>();
    log_start(replaced, stale);
    return train_loop();
  } catch (const std::exception& e) {
    if (log_) log_->error(e.what());
    // The checkpoint write in flight ends before the run does, and its own failure is reported.
    try {
      wait_for_checkpoint();
    } catch (const std::exception& write_error) {
      if (log_) log_->error(write_error.what());
    }
    comm_->end_job_after_error(e.what());
    throw_as_error(e);
  }
} catch (const std::exception& e) {
  throw_as_error(e);
}

RunResult Run::train_loop() {
  reset_peak_device_memory();
  const int64_t spe = trainer_->steps_per_epoch();
  step_ = start_.step;
  checkpointed_step_ = resume_ ? start_.step : -1;
  saved_step_ = checkpointed_step_;
  checkpointed_at_ = Clock::now();
  const auto t0 = Clock::now();
  eta_ = std::make_unique<Eta>(steps_to_run(), spe, trainer_->has_validation() ? 1 : 0);
  for (int64_t epoch = start_.epoch;
       epoch < config_.epochs && !stopped_at_limit_ && !stopped_early_ && !target_reached_; ++epoch) {
    // --profile: 5 warm-up and 20 measured steps (fewer in a short epoch) at the start of the run.
    if (options_.profile && epoch == start_.epoch) {
      const int64_t measure = std::max<int64_t>(1, std::min<int64_t>(20, (spe - 1) / 3));
      profiler_ = options_.profiler(trainer_->model(), device_, std::min<int64_t>(5, measure), measure);
    }
    start_epoch(epoch);
    Epoch e;
    e.index = epoch;
    // A checkpoint written inside this epoch: its batches were trained on already, and its sums
    // carry on, so the epoch ends as if it had not been stopped.
    if (epoch == start_.epoch) {
      e.sums = start_;
      e.entry_seen = start_.epoch_seen;
      for (int64_t i = start_.epoch * spe; i < start_.step; ++i)
        MINIDL_CHECK(trainer_->train_loader().advance(), "data loader: epoch ", epoch + 1,
                     " ended before the checkpoint's step");
    }
    e.t0 = Clock::now();
    e.first_step = step_;
    while (true) {
      if (options_.max_steps > 0 && step_ >= options_.max_steps) {
        stopped_at_limit_ = true;
        break;
      }
      if (step_ >= trainer_->total_steps()) break;  // a fractional last epoch ends part-way
      // The epoch's last step is done: it ends (checkpoint, evaluation) before a pending signal
      // is honoured, so a signal never saves a position between an epoch's steps and its end.
      if (step_ - epoch * spe >= spe) break;
      if (const int sig = agreed_stop_signal(*comm_, device_)) return ended(stopped_by(sig, e));
      const bool steps_due = config_.checkpoint_every_steps > 0 && step_ % config_.checkpoint_every_steps == 0;
      const bool time_due =
          config_.checkpoint_every_minutes > 0 && since(checkpointed_at_) >= 60 * config_.checkpoint_every_minutes;
      if ((steps_due || time_due) && step_ > 0 && step_ != checkpointed_step_) {
        if (!flush(e)) return ended(3);
        checkpoint(position(e, false));
      }
      if (profiler_) profiler_->before_step();
      step(profiler_ ? profiler_->active() : nullptr);
      if (profiler_) profiler_->after_step();
      test_kill_point("step", step_);
      // A non-finite loss stops the run within a few steps rather than at the epoch's end. Reading
      // the steps' losses waits for the device, so on a GPU they are read every 32 steps; every
      // rank reads at the same steps and holds the same all-reduced loss, so all stop together.
      if (step_ % (device_.is_cuda() ? kGpuLossReadSteps : 1) == 0 && !flush(e)) return ended(3);
      eta_->step_done(step_, since(t0));
      // Inside the epoch only: its end evaluates the same split.
      if (config_.eval_every_steps > 0 && step_ % config_.eval_every_steps == 0 && step_ - epoch * spe < spe &&
          step_ < trainer_->total_steps())
        evaluate_within_epoch(e);
      show_progress(e);
    }
    // A resumed checkpoint at an epoch's end written before its evaluation: the epoch ends again
    // (evaluation, metrics) without a step.
    const bool eval_pending = epoch == start_.epoch && step_ - epoch * spe > 0 && !start_.evaluated;
    if (step_ == e.first_step && !eval_pending) break;
    if (!end_epoch(e)) return ended(3);
  }
  return finish();
}

RunResult Run::ended(int exit_code) const {
  RunResult r;
  r.exit_code = exit_code;
  r.steps = step_;
  return r;
}

RunResult Run::finish() {
  wait_for_checkpoint();  // summary.json and "done" only once the last checkpoint is on disk
  const DeviceMemoryStats mem = device_memory_stats();
  RunResult r;
  r.steps = step_;
  r.test_acc = last_test_;
  r.tta_acc = last_tta_;
  r.val_acc = last_val_eval_ ? last_val_eval_->acc : -1;
  r.stopped_early = stopped_early_;
  r.train_seconds = train_seconds_;
  r.summary = {{"test_acc", last_test_},
               {"train_seconds", train_seconds_},
               {"images_per_s", train_seconds_ > 0 ? trained_images_ / train_seconds_ : 0.0},
               {"steps", step_},
               {"device", device_.str()},
               {"world_size", comm_->world_size()},
               {"deterministic", config_.deterministic},
               {"precision", to_string(*config_.precision)},
               {"memory_format", to_string(*config_.memory_format)},
               {"peak_device_bytes", mem.peak_bytes}};
  if (last_tta_ >= 0) r.summary["test_acc_tta"] = last_tta_;
  // Which images each number is measured on.
  r.summary["splits"] = {{"train", trainer_->train_loader().dataset_size()}, {"test", trainer_->test_size()}};
  std::string validation;
  if (last_val_eval_) {
    r.summary["splits"]["val"] = trainer_->val_size();
    r.summary["val_acc"] = last_val_eval_->acc;
    r.summary["val_loss"] = last_val_eval_->loss;
    if (last_val_eval_->tta_acc >= 0) r.summary["val_acc_tta"] = last_val_eval_->tta_acc;
    validation = str(", val ", fixed(last_val_eval_->acc, 2), "% (", trainer_->val_size(), " images)");
  }
  if (selection_->save_best() && selection_->best().seen) {
    r.summary["best"] = selection_->best_record();
    r.summary["best"]["path"] = kBestWeights;
    const MetricWatch& b = selection_->best();
    validation +=
        str(", best ", to_string(b.metric), " ", fixed(b.best, 4), " at epoch ", b.best_epoch, " (", kBestWeights,
            best_test_eval_ ? str(": test ", fixed(best_test_eval_->acc, 2), "%") : std::string(), ")");
    if (best_test_eval_) {
      r.summary["best"]["test_acc"] = best_test_eval_->acc;
      if (best_test_eval_->tta_acc >= 0) r.summary["best"]["test_acc_tta"] = best_test_eval_->tta_acc;
    }
  }
  if (stopped_early_) r.summary["stopped_early"] = selection_->stop_reason();
  const SampleKind kind = trainer_->sample_kind();
  if (kind == SampleKind::Tokens && last_test_eval_) {
    r.summary["test_loss"] = last_test_eval_->loss;
    r.summary["tokens_per_s"] =
        r.summary["images_per_s"].get<double>() * static_cast<double>(trainer_->outputs_per_sample());
  }
  if (kind == SampleKind::Volumes && last_test_eval_) {
    r.summary["test_loss"] = last_test_eval_->loss;
    r.summary["test_dice"] = last_test_eval_->dice;
    r.summary["test_class_dice"] = class_dice_json(last_test_eval_->class_dice);
    if (config_.target_dice > 0) {
      r.summary["target_dice"] = config_.target_dice;
      r.summary["time_to_target_s"] = target_reached_ ? nlohmann::json(time_to_target_) : nlohmann::json();
    }
  }
  if (!writer()) return r;
  if (last_test_eval_ && !last_test_eval_->confusion.empty())
    add_class_metrics(r.summary, trainer_->classes(), last_test_eval_->confusion, config_.tta, "test", *log_);
  write_file_atomic(run_dir_ + "/summary.json", r.summary.dump(2) + "\n", "run summary");
  // Seconds per epoch of the steps this process trained (a resume's or --max-steps' share).
  const double epochs_here =
      static_cast<double>(step_ - start_.step) / static_cast<double>(trainer_->steps_per_epoch());
  if (kind == SampleKind::Volumes && last_test_eval_) {
    const std::string target = config_.target_dice <= 0 ? std::string()
                               : target_reached_
                                   ? str(", time to Dice ", config_.target_dice, ": ", fixed(time_to_target_, 1), "s")
                                   : str(", eval.target_dice ", config_.target_dice, " not reached");
    log_->line(
        str("done: test Dice ", fixed(last_test_eval_->dice, 4), " (", trainer_->test_size(),
            trainer_->test_size() == 1 ? " test volume" : " test volumes", ", the final weights; voxels ",
            fixed(last_test_, 2), "% right), ", step_, " steps, training ", fixed(train_seconds_, 1), "s", target, ", ",
            fixed(r.summary["images_per_s"], 1), " volumes/s",
            device_.is_cuda() ? str(", peak device memory ", fixed(mem.peak_bytes / 1e9, 2), " GB") : std::string(),
            stopped_at_limit_ ? str(" [stopped at --max-steps ", options_.max_steps, "]") : std::string()));
    return r;
  }
  if (kind == SampleKind::Tokens && last_test_eval_) {
    const double tokens_per_s = r.summary["tokens_per_s"].get<double>();
    log_->line(str("done: val.bin loss ", fixed(last_test_eval_->loss, 4), " (perplexity ",
                   fixed(std::exp(last_test_eval_->loss), 2), ", ", trainer_->test_size(), " windows, the final weights), ",
                   step_, " steps, training ", fixed(train_seconds_, 1), "s, ", fixed(tokens_per_s, 0), " tok/s",
                   device_.is_cuda() ? str(", peak device memory ", fixed(mem.peak_bytes / 1e9, 2), " GB") : std::string(),
                   stopped_at_limit_ ? str(" [stopped at --max-steps ", options_.max_steps, "]") : std::string()));
    return r;
  }
  log_->line(
      str("done: test ", fixed(last_test_, 2), "%",
          last_tta_ >= 0 ? str(" (", to_string(config_.tta), " TTA ", fixed(last_tta_, 2), "%)") : std::string(), " (",
          trainer_->test_size(), " test images, the final weights)", validation, ", ", step_, " steps, training ",
          fixed(train_seconds_, 1), "s",
          epochs_here > 0 ? str(" (", fixed(train_seconds_ / epochs_here, 1), "s/epoch)") : std::string(), ", ",
          fixed(r.summary["images_per_s"], 0), " img/s",
          device_.is_cuda() ? str(", peak device memory ", fixed(mem.peak_bytes / 1e9, 2), " GB") : std::string(),
          stopped_at_limit_ ? str(" [stopped at --max-steps ", options_.max_steps, "]") : std::string(),
          stopped_early_ ? std::string(" [stopped early]") : std::string()));
  return r;
}

int run_training(const RunOptions& options) { return Run(options).execute().exit_code; }

}  // namespace minidl
