// What a resumed run may continue from, and with which settings.
#include "train/resume.h"

#include <filesystem>

#include "core/checked_math.h"
#include "core/error.h"
#include "core/json_limits.h"
#include "train/run.h"

namespace minidl {

namespace fs = std::filesystem;

TrainConfig resume_config(const RunOptions& o, const CheckpointInfo& info, const std::string& run_dir,
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
  // Fewer epochs would change the run's schedule from the resumed step on (a cosine or piecewise
  // schedule follows the run's length): the logs and the checkpoint would describe another run.
  MINIDL_CHECK(c.epochs >= before, where, ": --set epochs=", c.epochs, " is fewer than the ", before,
               " epochs the run was started with; a resumed run trains as long or longer (to stop it earlier, ",
               "pass --max-steps N)");
  *raised = c.epochs > before;
  MINIDL_CHECK(o.max_steps == 0 || o.max_steps > info.step, where, ": --max-steps ", o.max_steps,
               " is already reached (the checkpoint is at step ", info.step, ")");
  return c;
}

void check_micro_batches(const CheckpointInfo& info, int64_t micro_batches, int world_size, int64_t sync_norm_layers,
                         const std::string& run_dir) {
  MINIDL_CHECK(sync_norm_layers == 0 || info.world_size == world_size, "--resume ", run_dir, ": the model's ",
               sync_norm_layers, " synchronized BatchNorm layer(s) normalize over the batches of all ", info.world_size,
               " ranks it was trained on; at world size ", world_size,
               " they would normalize other batches and train another model: resume it on ", info.world_size,
               " ranks");
  const int64_t accumulate = info.config.value("accumulate_steps", int64_t{1});
  const int64_t trained = info.world_size * accumulate;
  MINIDL_CHECK(trained == micro_batches, "--resume ", run_dir, ": the run was trained with ", trained, " micro-batches per step (world size ",
               info.world_size, " x accumulate_steps ", accumulate, "), this one would take ", micro_batches,
               " (world size ", world_size, "); ",
               trained % world_size == 0 ? str("resume with --set accumulate_steps=", trained / world_size,
                                               " to continue with the same bits")
                                         : str("use a world size that divides ", trained));
}

void check_resume_position(const CheckpointInfo& info, int64_t steps_per_epoch, int64_t total_steps,
                           int64_t batch_size, const std::string& run_dir, double epochs, bool epochs_set) {
  const std::string ckpt = run_dir + "/" + kCheckpointFile;
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

void check_resume_data(const CheckpointInfo& info, uint32_t data_crc32, int64_t images, const std::string& run_dir) {
  if (info.data_crc32.empty()) return;
  const std::string now = crc_hex(data_crc32);
  MINIDL_CHECK(now == info.data_crc32, "--resume ", run_dir, ": the training data changed since the checkpoint was ",
               "written (CRC-32 ", now, " of the ", images, " training images now, ", info.data_crc32,
               " then): the run would go on with other images than it trained on; restore the data it trained on, ",
               "or start a new run");
}

CheckpointInfo read_resume_checkpoint(const std::string& run_dir) {
  const std::string ckpt = run_dir + "/" + kCheckpointFile;
  auto exists = [&](const std::string& path) {
    std::error_code ec;
    const bool found = fs::exists(path, ec);
    MINIDL_CHECK(!ec, "--resume ", run_dir, ": cannot look for ", path, " (", ec.message(), ")");
    return found;
  };
  if (!exists(ckpt)) {
    MINIDL_CHECK(!exists(run_dir + "/config.json"), "--resume ", run_dir, ": the run stopped before its first ",
                 "checkpoint, so there is nothing to resume; start it again with: minidl train --resume ", run_dir,
                 " --restart");
    fail(str("--resume ", run_dir, ": no ", kCheckpointFile, " there (nothing to resume)"));
  }
  return read_checkpoint_info(ckpt);
}

TrainConfig restart_config(const RunOptions& o, const std::string& run_dir) {
  MINIDL_CHECK(o.config_path.empty() && o.output_dir.empty() && o.overrides.empty() && !o.overwrite,
               "--restart starts the run in ", run_dir, " again as it was configured: --config, --output, --set and ",
               "--overwrite cannot be combined with it");
  return load_train_config(run_dir + "/config.json", {}, o.device, run_dir);
}

bool same_position(const CheckpointInfo& a, const CheckpointInfo& b) {
  return a.step == b.step && a.epoch == b.epoch && a.evaluated == b.evaluated && a.config == b.config;
}

}  // namespace minidl
