#include "optim/schedule.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/enum_names.h"
#include "core/error.h"
#include "core/field_kinds.h"
#include "core/json_limits.h"
#include "core/type_table.h"

namespace minidl {

enum class WarmupDecay { Linear, Cosine };
template <>
struct EnumNames<WarmupDecay> {
  static constexpr EnumName<WarmupDecay> values[] = {{WarmupDecay::Linear, "linear"}, {WarmupDecay::Cosine, "cosine"}};
};

// What the warm-up's decay spans: the steps after the warm-up (the rise, then the fall), or the
// whole run with the rise multiplied in (timm's and many PyTorch recipes' LambdaLR of warm-up
// times cosine: the fall has begun when the rise ends).
enum class DecaySpan { Rest, Run };
template <>
struct EnumNames<DecaySpan> {
  static constexpr EnumName<DecaySpan> values[] = {{DecaySpan::Rest, "rest"}, {DecaySpan::Run, "run"}};
};

namespace {

constexpr double kPi = 3.14159265358979323846;

double cosine_decay(double t) { return 0.5 * (1 + std::cos(kPi * std::min(std::max(t, 0.0), 1.0))); }

// A schedule that fits a run of any length (check_length's "").
struct FitsAnyRun {
  std::string check_length(int64_t, int64_t) const { return ""; }
};

struct ConstantSpec : FitsAnyRun {
  static constexpr const char* kName = "constant";
  static const Fields<ConstantSpec>& fields() {
    static const Fields<ConstantSpec> f;
    return f;
  }
  double factor(int64_t, int64_t, int64_t) const { return 1.0; }
};

struct StepSpec : FitsAnyRun {
  static constexpr const char* kName = "step";
  int64_t step_size;
  double gamma;
  static const Fields<StepSpec>& fields() {
    static const Fields<StepSpec> f{{integer("step_size", &StepSpec::step_size, kRequired, {1}, "epochs per step"),
                                     number("gamma", &StepSpec::gamma, 0.1, kAtLeastZero, "the factor per step")}};
    return f;
  }
  double factor(int64_t step, int64_t spe, int64_t) const {
    return std::pow(gamma, static_cast<double>(step / spe / step_size));
  }
};

struct CosineSpec : FitsAnyRun {
  static constexpr const char* kName = "cosine";
  double min_factor;
  static const Fields<CosineSpec>& fields() {
    static const Fields<CosineSpec> f{{number("min_factor", &CosineSpec::min_factor, 0.0, kUnitInterval,
                                              "the factor at the end (a fraction of the lr)")}};
    return f;
  }
  double factor(int64_t step, int64_t, int64_t total) const {
    return min_factor + (1 - min_factor) * cosine_decay(static_cast<double>(step) / total);
  }
};

// The run's length in epochs, for messages.
double run_epochs(int64_t spe, int64_t total) { return static_cast<double>(total) / static_cast<double>(spe); }

// The warm-up's length is in epochs or a fraction of the run: one of the two is given.
struct WarmupSpec {
  static constexpr const char* kName = "warmup";
  std::optional<double> warmup_epochs, warmup_fraction;
  WarmupDecay decay;
  DecaySpan decay_over;
  static const Fields<WarmupSpec>& fields() {
    using S = WarmupSpec;
    // Their ranges are checked with the rule between them, in the run's words.
    Field<S> epochs = optional_number("warmup_epochs", &S::warmup_epochs, {},
                                      "epochs of the linear rise from 0 to 1 (required unless warmup_fraction)");
    epochs.range = "> 0";
    Field<S> fraction = optional_number("warmup_fraction", &S::warmup_fraction, {},
                                        "the rise as a fraction of the run, however long (instead of warmup_epochs)");
    fraction.range = "(0, 1)";
    static const Fields<S> f{
        {epochs, fraction,
         choice("decay", &S::decay, WarmupDecay::Linear, "the fall from 1 to 0 over the rest of the run"),
         written_when_set(choice("decay_over", &S::decay_over, DecaySpan::Rest,
                                 "rest: the fall spans the steps after the warm-up; run: it spans the whole run "
                                 "from step 0 and the rise multiplies it (warm-up factor x decay factor)"))},
        [](const S& s, const JsonArgs& args) {
          MINIDL_CHECK(!(s.warmup_epochs && s.warmup_fraction), args.path(),
                       ": give the warm-up as \"warmup_epochs\" or as \"warmup_fraction\" of the run, not both");
          MINIDL_CHECK(s.warmup_epochs || s.warmup_fraction, args.key_path("warmup_epochs"),
                       ": required key is missing (or give \"warmup_fraction\")");
          const bool in_fraction = s.warmup_fraction.has_value();
          const double warmup = s.warmup();
          MINIDL_CHECK(warmup > 0 && (!in_fraction || warmup < 1),
                       args.key_path(in_fraction ? "warmup_fraction" : "warmup_epochs"), ": expected ",
                       in_fraction ? "a fraction of the run in (0, 1)" : "> 0 epochs", ", got ", warmup);
        }};
    return f;
  }
  double warmup() const { return warmup_fraction ? *warmup_fraction : *warmup_epochs; }
  double factor(int64_t step, int64_t spe, int64_t total) const {
    const double warm_steps = warmup_fraction ? warmup() * static_cast<double>(total) : warmup() * spe;
    const double e = static_cast<double>(step) / spe;
    if (decay_over == DecaySpan::Run) {
      const double rise = warmup_fraction ? static_cast<double>(step) / warm_steps : e / warmup();
      return std::min(rise, 1.0) * fall(static_cast<double>(step) / static_cast<double>(total));
    }
    if (warmup_fraction && step < warm_steps) return static_cast<double>(step) / warm_steps;
    if (!warmup_fraction && e < warmup()) return e / warmup();
    return fall(total > warm_steps ? (step - warm_steps) / (total - warm_steps) : 1.0);
  }
  // The decay's factor at t in [0, 1] of its span.
  double fall(double t) const {
    return decay == WarmupDecay::Cosine ? cosine_decay(t) : 1 - std::min(std::max(t, 0.0), 1.0);
  }
  std::string check_length(int64_t spe, int64_t total) const {
    if (warmup_fraction || *warmup_epochs * static_cast<double>(spe) < static_cast<double>(total)) return "";
    return str("schedule.warmup_epochs ", *warmup_epochs, " is not shorter than the run's ", run_epochs(spe, total),
               " epochs: the lr rises for the whole run and never decays; set schedule.warmup_fraction (e.g. 0.1 of ",
               "the run) instead");
  }
};

// The points are epochs, fractions of the run or global steps: one of the three lists is given.
struct PiecewiseLinearSpec {
  static constexpr const char* kName = "piecewise_linear";
  std::vector<double> epochs, fractions, steps, factors;
  static const Fields<PiecewiseLinearSpec>& fields() {
    using S = PiecewiseLinearSpec;
    static const Fields<S> f{
        {number_list("epochs", &S::epochs, "the points in epochs, strictly increasing"),
         number_list("fractions", &S::fractions,
                     "the points as fractions of the run, strictly increasing (instead of epochs)"),
         number_list("steps", &S::steps, "the points in global steps, strictly increasing (instead of epochs)"),
         number_list("factors", &S::factors, "the factor at each point (required)")},
        [](const S& s, const JsonArgs& args) {
          const int given = !s.epochs.empty() + !s.fractions.empty() + !s.steps.empty();
          MINIDL_CHECK(given <= 1, args.path(),
                       ": give the points as \"epochs\", \"fractions\" of the run or \"steps\", not both");
          const std::string key = s.points_key();
          const std::vector<double>& points = s.points();
          MINIDL_CHECK(!points.empty(), args.key_path("epochs"),
                       ": required key is missing (or give \"fractions\" or \"steps\")");
          MINIDL_CHECK(!s.factors.empty(), args.key_path("factors"), ": required key is missing");
          MINIDL_CHECK(points.size() == s.factors.size(), args.path(), ": \"", key, "\" has ", points.size(),
                       " points but \"factors\" has ", s.factors.size());
          for (size_t k = 1; k < points.size(); ++k)
            MINIDL_CHECK(points[k] > points[k - 1], args.key_path(key), ": expected strictly increasing ", key,
                         ", got ", points[k - 1], " then ", points[k]);
        }};
    return f;
  }
  const char* points_key() const { return !fractions.empty() ? "fractions" : !steps.empty() ? "steps" : "epochs"; }
  const std::vector<double>& points() const { return !fractions.empty() ? fractions : !steps.empty() ? steps : epochs; }
  double factor(int64_t step, int64_t spe, int64_t total) const {
    const std::vector<double>& p = points();
    const double per = !fractions.empty() ? static_cast<double>(total) : !steps.empty() ? 1.0 : static_cast<double>(spe);
    const double e = static_cast<double>(step) / per;
    if (e <= p.front()) return factors.front();
    for (size_t k = 1; k < p.size(); ++k) {
      if (e <= p[k]) {
        const double w = (e - p[k - 1]) / (p[k] - p[k - 1]);
        return factors[k - 1] + w * (factors[k] - factors[k - 1]);
      }
    }
    return factors.back();
  }
  std::string check_length(int64_t spe, int64_t total) const {
    if (!fractions.empty()) return "";
    const std::vector<double>& p = points();
    const double end = p.back();
    const bool in_epochs = steps.empty();
    if (end * (in_epochs ? static_cast<double>(spe) : 1.0) >= static_cast<double>(total)) return "";
    std::string scaled;
    for (double e : p) scaled += (scaled.empty() ? "" : ", ") + str(std::round(e / end * 1000) / 1000);
    const char* unit = in_epochs ? "epoch" : "step";
    return str("schedule.", points_key(), " ends at ", unit, " ", end, " but the run trains ",
               in_epochs ? run_epochs(spe, total) : static_cast<double>(total), " ", unit,
               "s: every step after it trains at its last factor, ", factors.back(),
               factors.back() == 0 ? " (lr 0: those steps change nothing)" : "",
               "; give the points as fractions of the run, \"fractions\": [", scaled, "], or end schedule.",
               points_key(), " at the run's last ", unit);
  }
};

// A schedule of type Spec: its factor, after checking the counts, and its keys written back.
template <typename Spec>
class SpecSchedule : public LrSchedule {
 public:
  explicit SpecSchedule(Spec spec) : spec_(std::move(spec)) {}
  double factor(int64_t step, int64_t spe, int64_t total) const override {
    MINIDL_CHECK(spe > 0 && total > 0 && step >= 0, "lr schedule: step ", step, " with ", spe, " steps per epoch and ",
                 total, " in total (expected step >= 0 and positive counts)");
    return spec_.factor(step, spe, total);
  }
  nlohmann::json to_json() const override {
    nlohmann::json j = write_fields(Spec::fields(), spec_);
    j["type"] = Spec::kName;
    return j;
  }
  std::string check_length(int64_t spe, int64_t total) const override { return spec_.check_length(spe, total); }

 private:
  Spec spec_;
};

template <typename Spec>
std::unique_ptr<LrSchedule> make(JsonArgs& args) {
  return std::make_unique<SpecSchedule<Spec>>(read_struct(Spec::fields(), args));
}

template <typename Spec>
ScheduleDescriptor describe(const char* summary) {
  return {Spec::kName, summary, field_infos(Spec::fields()), make<Spec>};
}

}  // namespace

const std::vector<const ScheduleDescriptor*>& schedule_types() {
  static const ScheduleDescriptor constant = describe<ConstantSpec>("1");
  static const ScheduleDescriptor step =
      describe<StepSpec>("gamma ^ floor(epoch / step_size), stepped per epoch (torch.optim.lr_scheduler.StepLR)");
  static const ScheduleDescriptor cosine = describe<CosineSpec>(
      "min_factor + (1 - min_factor) (1 + cos(pi t)) / 2, t "
      "the fraction of the run");
  static const ScheduleDescriptor warmup =
      describe<WarmupSpec>("epoch / warmup_epochs (or t / warmup_fraction), then from 1 to 0 over the rest of the run");
  static const ScheduleDescriptor piecewise = describe<PiecewiseLinearSpec>(
      "linear between (point, factor) pairs, flat outside (np.interp): one-cycle, airbench's triangle");
  static const std::vector<const ScheduleDescriptor*> table = {&constant, &step, &cosine, &warmup, &piecewise};
  return table;
}

std::unique_ptr<LrSchedule> make_schedule(const nlohmann::json& config, const std::string& path) {
  MINIDL_CHECK(config.is_object(), path, ": expected an object with \"type\", got ", json_excerpt(config));
  JsonArgs args(config, path);
  return read_type(schedule_types(), args, "schedule").make(args);
}

}  // namespace minidl
