#include "train/progress.h"

#include <algorithm>
#include <cmath>

#include "train/text_format.h"

namespace minidl {

Eta::Eta(int64_t total_steps, int64_t steps_per_epoch, int64_t extra_evals)
    : total_steps_(total_steps), steps_per_epoch_(std::max<int64_t>(1, steps_per_epoch)), extra_evals_(extra_evals) {}

void Eta::step_done(int64_t step, double now) {
  if (first_step_ < 0) {
    first_step_ = step;
    first_time_ = now;
  } else {
    eval_seconds_ += pending_eval_seconds_;
  }
  pending_eval_seconds_ = 0;
  last_step_ = step;
  last_time_ = now;
}

void Eta::eval_done(double seconds) {
  last_eval_seconds_ = seconds;
  pending_eval_seconds_ += seconds;
}

double Eta::seconds_left(int64_t step) const {
  if (step >= total_steps_) return 0;
  if (first_step_ < 0 || last_step_ <= first_step_) return -1;
  const double per_step =
      std::max(0.0, last_time_ - first_time_ - eval_seconds_) / static_cast<double>(last_step_ - first_step_);
  // The evaluations still due: one at each epoch end after `step`, one at the run's last step
  // when it ends inside an epoch, and the extra ones at the end.
  const int64_t epoch_ends = total_steps_ / steps_per_epoch_ - step / steps_per_epoch_;
  const int64_t evals = epoch_ends + (total_steps_ % steps_per_epoch_ != 0 ? 1 : 0) + extra_evals_;
  return per_step * static_cast<double>(total_steps_ - step) + last_eval_seconds_ * static_cast<double>(evals);
}

void RunningLoss::add(double loss) {
  losses_.push_back(loss);
  if (losses_.size() > window_) losses_.pop_front();
}

double RunningLoss::mean() const {
  // Summed again rather than kept as a running difference: no drift over a long run.
  double s = 0;
  for (double l : losses_) s += l;
  return losses_.empty() ? 0 : s / static_cast<double>(losses_.size());
}

std::string progress_detail(const RunningLoss& loss, double images_per_s, double lr, double eta_seconds) {
  std::string out;
  const auto add = [&](const std::string& part) { out += (out.empty() ? "" : " ") + part; };
  if (!loss.empty()) add("loss " + fixed(loss.mean(), 4));
  if (images_per_s > 0 && std::isfinite(images_per_s)) add(fixed(images_per_s, 0) + " img/s");
  add("lr " + fixed(lr, 4));
  if (eta_seconds >= 0) add("ETA " + duration_text(eta_seconds));
  return out;
}

}  // namespace minidl
