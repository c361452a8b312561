#include "train/model_selection.h"

#include <cmath>

#include "core/error.h"
#include "core/json_limits.h"

namespace minidl {

namespace {

MetricWatch watch(Metric metric, const std::optional<MonitorMode>& mode, double min_delta) {
  MetricWatch w;
  w.metric = metric;
  w.mode = mode ? *mode : auto_mode(metric);
  w.min_delta = min_delta;
  return w;
}

// The fix for a val_* metric without a validation split, naming the key that asked for it.
void check_watch(const MetricWatch& w, const char* key, bool has_validation) {
  MINIDL_CHECK(!on_validation(w.metric) || has_validation, key, ": \"", to_string(w.metric),
               "\" is measured on a validation split and this data has none: hold one out with data.val_fraction ",
               "(e.g. 0.1), give an image folder a val/ beside train/ and test/, or watch \"train_loss\"");
}

}  // namespace

bool MetricWatch::improves(double value) const {
  if (!std::isfinite(value)) return false;
  if (!seen) return true;
  return mode == MonitorMode::Min ? value < best - min_delta : value > best + min_delta;
}

bool MetricWatch::update(double value, int64_t epoch, int64_t step) {
  if (improves(value)) {
    seen = true;
    best = value;
    best_epoch = epoch;
    best_step = step;
    wait = 0;
    return true;
  }
  // A value that is not finite is no improvement, and no best either: the first finite value
  // after it becomes the best, while the count of epochs without one goes on.
  ++wait;
  return false;
}

nlohmann::json MetricWatch::state() const {
  if (!seen) return wait == 0 ? nlohmann::json::object() : nlohmann::json{{"wait", wait}};
  return {{"best", best}, {"epoch", best_epoch}, {"step", best_step}, {"wait", wait}};
}

void MetricWatch::load_state(const nlohmann::json& state, const std::string& where) {
  MINIDL_CHECK(state.is_object(), where, ": expected an object, got ", json_excerpt(state));
  seen = state.contains("best");
  wait = 0;
  if (!seen && state.contains("wait") && state.size() == 1) {
    MINIDL_CHECK(state["wait"].is_number_integer() && state["wait"].get<int64_t>() >= 0, where, ": 'wait' is ",
                 json_excerpt(state["wait"]), ", expected an integer >= 0");
    wait = state["wait"].get<int64_t>();
    return;
  }
  if (!seen && state.empty()) return;
  for (const char* key : {"best", "epoch", "step", "wait"})
    MINIDL_CHECK(state.contains(key) && state[key].is_number(), where, ": '", key, "' is missing or not a number");
  for (const char* key : {"epoch", "step", "wait"})
    MINIDL_CHECK(state[key].is_number_integer() && state[key].get<int64_t>() >= 0, where, ": '", key, "' is ",
                 json_excerpt(state[key]), ", expected an integer >= 0");
  best = state["best"].get<double>();
  best_epoch = state["epoch"].get<int64_t>();
  best_step = state["step"].get<int64_t>();
  wait = state["wait"].get<int64_t>();
}

ModelSelection::ModelSelection(const TrainConfig& c)
    : save_best_(c.save_best),
      patience_(c.early_stopping_patience ? *c.early_stopping_patience : -1),
      best_(watch(c.best_monitor, c.best_mode, 0)),
      stop_(watch(c.early_stopping_monitor, c.early_stopping_mode, c.early_stopping_min_delta)) {}

void ModelSelection::check_data(bool has_validation) const {
  if (save_best_) check_watch(best_, "checkpoint.monitor", has_validation);
  if (early_stopping()) check_watch(stop_, "early_stopping.monitor", has_validation);
}

ModelSelection::Decision ModelSelection::update(const nlohmann::json& record, int64_t epoch, int64_t step) {
  const auto value = [&](const MetricWatch& w) {
    const char* name = to_string(w.metric);
    MINIDL_CHECK(record.contains(name) && record[name].is_number(), "model selection: the epoch's record has no ",
                 name);
    return record[name].get<double>();
  };
  Decision d;
  if (save_best_) d.new_best = best_.update(value(best_), epoch, step);
  if (early_stopping()) {
    stop_.update(value(stop_), epoch, step);
    d.stop = stopped();
  }
  return d;
}

nlohmann::json ModelSelection::state() const {
  nlohmann::json j = nlohmann::json::object();
  if (save_best_) j["best"] = best_.state();
  if (early_stopping()) j["early_stopping"] = stop_.state();
  return j.empty() ? nlohmann::json() : j;
}

void ModelSelection::load_state(const nlohmann::json& state, const std::string& where) {
  if (state.is_null()) return;
  MINIDL_CHECK(state.is_object(), where, ": expected an object, got ", json_excerpt(state));
  if (save_best_ && state.contains("best")) best_.load_state(state["best"], where + ".best");
  if (early_stopping() && state.contains("early_stopping"))
    stop_.load_state(state["early_stopping"], where + ".early_stopping");
}

std::string ModelSelection::stop_reason() const {
  return str("early stopping: ", to_string(stop_.metric), " has not improved by more than ", stop_.min_delta, " for ",
             stop_.wait, stop_.wait == 1 ? " epoch" : " epochs", " (best ", stop_.best, " at epoch ", stop_.best_epoch,
             ", patience ", patience_, ")");
}

nlohmann::json ModelSelection::best_record() const {
  return {{"epoch", best_.best_epoch},
          {"step", best_.best_step},
          {"monitor", to_string(best_.metric)},
          {"mode", to_string(best_.mode)},
          {"value", best_.best}};
}

}  // namespace minidl
