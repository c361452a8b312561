// Learning-rate schedules as factors of the optimizer's lr, functions of the fractional epoch
// e = step / steps_per_epoch (so they change every step, as in the DAWNBench and airbench
// recipes) or of the fraction of the run t = step / total_steps:
//   constant                                    1
//   step         {"step_size": 8, "gamma": 0.1} gamma ^ floor(floor(e) / step_size) (StepLR per epoch)
//   cosine       {"min_factor": 0}              min + (1 - min) (1 + cos(pi t)) / 2
//   warmup       {"warmup_epochs": 2, "decay": "linear"|"cosine"}
//                                               e / warmup_epochs, then 1 -> 0 over the rest
//   piecewise_linear {"epochs": [0, 5, 24], "factors": [0, 1, 0]}
//                                               linear between the points, flat outside (np.interp)
//                    {"fractions": [0, 0.23, 1], "factors": [0.2, 1, 0.07]}
//                                               the same with points in t (airbench's triangle)
//                    {"steps": [0, 7], "factors": [1, 0]}
//                                               the same with points in global steps
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/json_limits.h"
#include "core/json_args.h"
#include "optim/optimizer.h"

namespace minidl {

namespace {

constexpr double kPi = 3.14159265358979323846;

void check_steps(int64_t step, int64_t steps_per_epoch, int64_t total_steps) {
  MINIDL_CHECK(steps_per_epoch > 0 && total_steps > 0 && step >= 0, "lr schedule: step ", step,
               " with ", steps_per_epoch, " steps per epoch and ", total_steps,
               " in total (expected step >= 0 and positive counts)");
}

double cosine_decay(double t) { return 0.5 * (1 + std::cos(kPi * std::min(std::max(t, 0.0), 1.0))); }

class ConstantSchedule : public LrSchedule {
 public:
  double factor(int64_t step, int64_t spe, int64_t total) const override {
    check_steps(step, spe, total);
    return 1.0;
  }
  nlohmann::json to_json() const override { return {{"type", "constant"}}; }
};

class StepSchedule : public LrSchedule {
 public:
  StepSchedule(int64_t step_size, double gamma) : step_size_(step_size), gamma_(gamma) {}
  double factor(int64_t step, int64_t spe, int64_t total) const override {
    check_steps(step, spe, total);
    return std::pow(gamma_, static_cast<double>(step / spe / step_size_));
  }
  nlohmann::json to_json() const override {
    return {{"type", "step"}, {"step_size", step_size_}, {"gamma", gamma_}};
  }

 private:
  int64_t step_size_;
  double gamma_;
};

class CosineSchedule : public LrSchedule {
 public:
  explicit CosineSchedule(double min_factor) : min_(min_factor) {}
  double factor(int64_t step, int64_t spe, int64_t total) const override {
    check_steps(step, spe, total);
    return min_ + (1 - min_) * cosine_decay(static_cast<double>(step) / total);
  }
  nlohmann::json to_json() const override { return {{"type", "cosine"}, {"min_factor", min_}}; }

 private:
  double min_;
};

class WarmupSchedule : public LrSchedule {
 public:
  WarmupSchedule(double warmup_epochs, std::string decay)
      : warmup_(warmup_epochs), decay_(std::move(decay)) {}
  double factor(int64_t step, int64_t spe, int64_t total) const override {
    check_steps(step, spe, total);
    const double e = static_cast<double>(step) / spe;
    if (e < warmup_) return e / warmup_;
    const double warm_steps = warmup_ * spe;
    const double t = total > warm_steps ? (step - warm_steps) / (total - warm_steps) : 1.0;
    return decay_ == "cosine" ? cosine_decay(t) : 1 - std::min(std::max(t, 0.0), 1.0);
  }
  nlohmann::json to_json() const override {
    return {{"type", "warmup"}, {"warmup_epochs", warmup_}, {"decay", decay_}};
  }

 private:
  double warmup_;
  std::string decay_;
};

// The unit of a piecewise_linear schedule's points: its JSON key.
enum class PointUnit { Epochs, Fractions, Steps };
constexpr const char* kPointKeys[] = {"epochs", "fractions", "steps"};

class PiecewiseLinearSchedule : public LrSchedule {
 public:
  PiecewiseLinearSchedule(std::vector<double> points, std::vector<double> factors, PointUnit unit)
      : epochs_(std::move(points)), factors_(std::move(factors)), unit_(unit) {}
  double factor(int64_t step, int64_t spe, int64_t total) const override {
    check_steps(step, spe, total);
    const double per = unit_ == PointUnit::Fractions ? static_cast<double>(total)
                       : unit_ == PointUnit::Epochs  ? static_cast<double>(spe)
                                                     : 1.0;
    const double e = static_cast<double>(step) / per;
    if (e <= epochs_.front()) return factors_.front();
    for (size_t k = 1; k < epochs_.size(); ++k) {
      if (e <= epochs_[k]) {
        const double w = (e - epochs_[k - 1]) / (epochs_[k] - epochs_[k - 1]);
        return factors_[k - 1] + w * (factors_[k] - factors_[k - 1]);
      }
    }
    return factors_.back();
  }
  nlohmann::json to_json() const override {
    return {{"type", "piecewise_linear"}, {kPointKeys[static_cast<int>(unit_)], epochs_}, {"factors", factors_}};
  }

 private:
  std::vector<double> epochs_, factors_;
  PointUnit unit_;
};

std::vector<double> read_numbers(JsonArgs& args, const std::string& key) {
  const nlohmann::json& j = args.get_json(key);
  MINIDL_CHECK(j.is_array() && !j.empty(), args.key_path(key), ": expected a non-empty list of numbers, got ",
               json_excerpt(j));
  std::vector<double> v;
  for (size_t i = 0; i < j.size(); ++i) {
    MINIDL_CHECK(j[i].is_number(), args.key_path(key), "[", i, "]: expected a number, got ", json_excerpt(j[i]));
    v.push_back(j[i].get<double>());
  }
  return v;
}

}  // namespace

std::unique_ptr<LrSchedule> make_schedule(const nlohmann::json& config, const std::string& path) {
  MINIDL_CHECK(config.is_object(), path, ": expected an object with \"type\", got ", json_excerpt(config));
  JsonArgs args(config, path);
  const std::string type = args.get_string("type", "");
  std::unique_ptr<LrSchedule> s;
  if (type == "constant") {
    s = std::make_unique<ConstantSchedule>();
  } else if (type == "step") {
    const int64_t step_size = args.get_int("step_size");
    const double gamma = args.get_float("gamma", 0.1);
    MINIDL_CHECK(step_size > 0, args.key_path("step_size"), ": expected > 0 epochs, got ", step_size);
    MINIDL_CHECK(gamma >= 0, args.key_path("gamma"), ": expected >= 0, got ", gamma);
    s = std::make_unique<StepSchedule>(step_size, gamma);
  } else if (type == "cosine") {
    const double min_factor = args.get_float("min_factor", 0.0);
    MINIDL_CHECK(min_factor >= 0 && min_factor <= 1, args.key_path("min_factor"),
                 ": expected 0..1 (a fraction of the lr), got ", min_factor);
    s = std::make_unique<CosineSchedule>(min_factor);
  } else if (type == "warmup") {
    const double warmup = args.get_float("warmup_epochs");
    const std::string decay = args.get_string("decay", "linear");
    MINIDL_CHECK(warmup > 0, args.key_path("warmup_epochs"), ": expected > 0, got ", warmup);
    MINIDL_CHECK(decay == "linear" || decay == "cosine", args.key_path("decay"),
                 ": expected \"linear\" or \"cosine\", got ", json_excerpt(decay));
    s = std::make_unique<WarmupSchedule>(warmup, decay);
  } else if (type == "piecewise_linear") {
    PointUnit unit = PointUnit::Epochs;
    int given = 0;
    for (PointUnit u : {PointUnit::Epochs, PointUnit::Fractions, PointUnit::Steps})
      if (args.has(kPointKeys[static_cast<int>(u)])) {
        unit = u;
        ++given;
      }
    MINIDL_CHECK(given <= 1, path, ": give the points as \"epochs\", \"fractions\" of the run or \"steps\", not both");
    const std::string key = kPointKeys[static_cast<int>(unit)];
    std::vector<double> epochs = read_numbers(args, key);
    std::vector<double> factors = read_numbers(args, "factors");
    MINIDL_CHECK(epochs.size() == factors.size(), path, ": \"", key, "\" has ", epochs.size(),
                 " points but \"factors\" has ", factors.size());
    for (size_t k = 1; k < epochs.size(); ++k)
      MINIDL_CHECK(epochs[k] > epochs[k - 1], args.key_path(key), ": expected strictly increasing ", key, ", got ",
                   epochs[k - 1], " then ", epochs[k]);
    s = std::make_unique<PiecewiseLinearSchedule>(std::move(epochs), std::move(factors), unit);
  } else {
    fail(str(args.key_path("type"), ": unknown schedule \"", type,
             "\" (expected constant, step, cosine, warmup or piecewise_linear)"));
  }
  args.finish();
  return s;
}

}  // namespace minidl
