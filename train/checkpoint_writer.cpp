#include "train/checkpoint_writer.h"

#include <chrono>
#include <cstdint>
#include <utility>

#include "core/allocator.h"
#include "core/device.h"
#include "core/error.h"
#include "core/test_hooks.h"

namespace minidl {

using Clock = std::chrono::steady_clock;

CheckpointWriter::CheckpointWriter() : thread_([this] { loop(); }) {}

CheckpointWriter::~CheckpointWriter() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void CheckpointWriter::write(const std::string& dir, const Module& model, const Optimizer& optimizer,
                             const CheckpointInfo& info, int64_t previous_step, int64_t keep,
                             const std::string& weights_path) {
  wait();
  const std::vector<std::pair<std::string, Tensor>> tensors = checkpoint_tensors(model, optimizer);
  size_t total = 0;
  for (const auto& [name, t] : tensors) {
    MINIDL_CHECK(t.defined() && t.is_contiguous(), "checkpoint: state tensor '", name, "' is ",
                 t.defined() ? "not contiguous" : "undefined");
    total += t.nbytes();
  }
  if (total > capacity_) {
    buffer_.reset();  // the old block goes back before the larger one is taken
    capacity_ = 0;
    buffer_ = allocate_pinned(total);
    capacity_ = total;
  }
  // Every copy is queued behind the steps already queued on the stream (so it reads the state
  // at this step) and ahead of the next ones (so nothing changes it while it is read); one
  // synchronize waits for them all.
  tensors_.clear();
  auto* at = static_cast<uint8_t*>(buffer_.get());
  Device device = Device::cpu();
  for (const auto& [name, t] : tensors) {
    copy_bytes_async(at, Device::cpu(), t.raw_data(), t.device(), t.nbytes());
    tensors_.push_back({name, t.dtype(), t.shape(), at, t.nbytes()});
    at += t.nbytes();
    if (t.is_cuda()) device = t.device();
  }
  synchronize(device);
  dir_ = dir;
  metadata_ = checkpoint_metadata(optimizer, info);
  step_ = info.step;
  previous_step_ = previous_step;
  keep_ = keep;
  weights_path_ = weights_path;
  weights_count_ = model.state_dict().size();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    in_flight_ = true;
  }
  changed_.notify_all();
}

void CheckpointWriter::wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return !in_flight_; });
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

double CheckpointWriter::last_write_seconds() {
  std::lock_guard<std::mutex> lock(mutex_);
  return write_seconds_;
}

void CheckpointWriter::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    changed_.wait(lock, [this] { return in_flight_ || stopping_; });
    if (!in_flight_) return;
    lock.unlock();
    std::exception_ptr error;
    const auto t0 = Clock::now();
    try {
      test_pause_point("CHECKPOINT_WRITE");
      write_run_checkpoint(dir_, tensors_, metadata_, step_, previous_step_, keep_);
      if (!weights_path_.empty()) {
        const std::vector<TensorBytes> weights(tensors_.begin(), tensors_.begin() + static_cast<long>(weights_count_));
        save_safetensors_bytes(weights_path_, weights, weights_metadata(weights));
      }
    } catch (...) {
      error = std::current_exception();
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    lock.lock();
    error_ = error;
    write_seconds_ = seconds;
    in_flight_ = false;
    changed_.notify_all();
  }
}

}  // namespace minidl
