// TensorBoard event files: what `"log": {"tensorboard": true}` writes into a run folder, so
// `tensorboard --logdir runs/` shows the run's curves. The file is TensorFlow's: TFRecord
// framing (little-endian uint64 length, masked CRC-32C of the length, the record, masked CRC-32C
// of the record) around serialized Event protos (train/tensorboard_event.proto, built with
// Debian's protobuf). The reader checks every CRC; the tests and `scripts/gpu/tensorboard_check.py`
// (TensorBoard's own reader) read the files back.
#pragma once
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace minidl {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as TFRecord uses.
uint32_t crc32c(const void* data, size_t size);
// TFRecord's masked form: rotate right by 15 and add 0xa282ead8.
uint32_t masked_crc32c(const void* data, size_t size);

class TensorBoardWriter {
 public:
  // Creates `dir`/events.out.tfevents.<unix seconds>.<hostname> (".<pid>" appended if that name
  // is taken) and writes the file_version record and a SessionLog START at `start_step`: a
  // resumed run starts at its checkpoint's step, and TensorBoard then drops what an earlier file
  // logged at that step and after (the epoch the resumed run does again).
  TensorBoardWriter(const std::string& dir, int64_t start_step);
  // One scalar summary; `wall_time` in seconds since the epoch (now when negative).
  void scalar(const std::string& tag, int64_t step, float value, double wall_time = -1);
  void flush();
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& bytes);
  std::string path_;
  std::ofstream out_;
};

// The scalars an epoch's metrics.jsonl record becomes (tag, value), logged by RunLog at the
// epoch's last step (the record's "step" - 1):
// accuracy/{train,test,test_tta,val,val_tta}, epoch/{train_loss,val_loss}, lr, throughput/images_per_s, time/epoch_s,
// time/eval_s, time/step_ms (the epoch's seconds over `steps` steps) and epoch. Keys a record
// lacks (test_acc_tta without TTA) give no scalar.
std::vector<std::pair<std::string, double>> tensorboard_epoch_scalars(const nlohmann::json& record, int64_t steps);
// The tag of the per-step training loss (steps.jsonl's "loss").
inline constexpr const char* kTensorBoardLossTag = "train/loss";

// An event file read back: every record's CRCs checked (an Error names the file and record).
struct TensorBoardEvents {
  struct Scalar {
    std::string tag;
    int64_t step;
    float value;
    double wall_time;
  };
  std::string file_version;           // "brain.Event:2"
  std::vector<int64_t> session_starts;  // steps of SessionLog START records
  std::vector<Scalar> scalars;        // in file order
};
TensorBoardEvents read_tensorboard_events(const std::string& path);

}  // namespace minidl
