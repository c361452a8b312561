// A run's checkpoints, written off the training thread. write() costs the training thread a
// snapshot only: every state tensor copied into host memory the writer owns (pinned, so the
// device-to-host copies run asynchronously on minidl's stream, followed by one synchronize) and
// the metadata. The writer's thread then does the rest of write_run_checkpoint's work: the CRC-32,
// the safetensors file (fsync, atomic rename) and the rotation of the kept checkpoints; the file is
// byte for byte the one the synchronous path writes for the same state. That thread touches no
// Tensor (tensors and their allocators belong to the training thread), only the snapshot's bytes.
//
// One write at a time: write() first waits for the one in flight, so the memory is one snapshot
// (reused, grown when a checkpoint is larger) and the kept files rotate in step order. A failed
// write's error, which names the file, is thrown by the next write() or wait(): a run waits at
// every place it ends, so the failure is reported there at the latest.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/safetensors.h"
#include "train/checkpoint.h"

namespace minidl {

class CheckpointWriter {
 public:
  CheckpointWriter();
  // Waits for the write in flight; an error no wait() has thrown is dropped (the run is ending
  // with another error already).
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Waits for the previous write (throwing its error), takes the snapshot of `model` and
  // `optimizer` at `info`, and returns: from here training may change them. The write is
  // write_run_checkpoint(dir, ..., info.step, previous_step, keep) on the writer's thread, then,
  // when `weights_path` is not empty, the model's state dict alone to that file from the same
  // snapshot (the bytes of save_weights(weights_path, model)).
  void write(const std::string& dir, const Module& model, const Optimizer& optimizer, const CheckpointInfo& info,
             int64_t previous_step, int64_t keep, const std::string& weights_path = "");
  // Waits for the write in flight: once it returns, that checkpoint is complete on disk. Throws
  // the error of a write that failed, once.
  void wait();
  // Seconds the writer's thread spent on the last finished write (CRC, file, fsync, rename,
  // rotation); bench train reports it beside the snapshot's cost.
  double last_write_seconds();

 private:
  void loop();

  // The snapshot: written by write() while no write is in flight, read by the thread during one.
  std::shared_ptr<void> buffer_;
  size_t capacity_ = 0;
  std::string dir_;
  std::vector<TensorBytes> tensors_;  // views into buffer_
  std::map<std::string, std::string> metadata_;
  int64_t step_ = 0, previous_step_ = -1, keep_ = 1;
  std::string weights_path_;
  size_t weights_count_ = 0;  // the model's tensors: the first of tensors_

  std::mutex mutex_;
  std::condition_variable changed_;
  bool in_flight_ = false;  // a snapshot is queued or being written
  bool stopping_ = false;
  std::exception_ptr error_;
  double write_seconds_ = 0;
  std::thread thread_;  // last: it starts once everything it uses exists
};

}  // namespace minidl
