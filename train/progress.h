// What the progress line shows besides the bar: the time the run has left (Eta), the running
// loss (RunningLoss), images/s and the learning rate.
#pragma once
#include <cstdint>
#include <deque>
#include <string>

namespace minidl {

// The time a run has left, from what its steps and evaluations took so far in this process: the
// remaining steps at the rate of the steps after the first one timed (which carries the warm-up:
// cuDNN's algorithm search, the first CUDA graph capture, the allocator filling its cache), and
// one evaluation per remaining epoch end, plus `extra_evals` at the run's end (the test pass of a
// run with a validation split), at the last evaluation's time. The times are passed in, seconds
// on one monotonic clock, so a test drives it with a fake one.
class Eta {
 public:
  Eta(int64_t total_steps, int64_t steps_per_epoch, int64_t extra_evals);
  // `step` global steps are done at time `now`.
  void step_done(int64_t step, double now);
  // An evaluation took `seconds` (it ran between two step_done calls).
  void eval_done(double seconds);
  // Seconds left after `step` steps and the evaluations due up to it; < 0 while unknown (fewer
  // than two steps timed).
  double seconds_left(int64_t step) const;

 private:
  int64_t total_steps_, steps_per_epoch_, extra_evals_;
  int64_t first_step_ = -1, last_step_ = -1;
  double first_time_ = 0, last_time_ = 0;
  double eval_seconds_ = 0;          // the evaluations' time between the first and the last step timed
  double pending_eval_seconds_ = 0;  // the evaluations' time since the last step timed
  double last_eval_seconds_ = 0;     // 0 until one ran
};

// The mean of the last `window` step losses (Lightning's running loss shows the last 20).
class RunningLoss {
 public:
  explicit RunningLoss(size_t window = 20) : window_(window) {}
  void add(double loss);
  bool empty() const { return losses_.empty(); }
  double mean() const;

 private:
  size_t window_;
  std::deque<double> losses_;
};

// "loss 0.9132 1220 img/s lr 0.0400 ETA 7m12s"; a part that is not known yet (no loss read, no
// rate, no ETA: < 0) is left out.
std::string progress_detail(const RunningLoss& loss, double images_per_s, double lr, double eta_seconds);

}  // namespace minidl
