#include "train/config.h"

#include <cmath>

#include "core/error.h"
#include "core/json_args.h"
#include "core/json_limits.h"
#include "train/precision.h"

namespace minidl {

using nlohmann::json;

json read_json_file(const std::string& path) {
  const std::string what = str("config file '", path, "'");
  json j = parse_json_limited(read_file_limited(path, "config file"), what);
  MINIDL_CHECK(j.is_object(), what, ": expected a JSON object {...} at the top level, got ", j.type_name());
  return j;
}

void apply_override(json& config, const std::string& assignment) {
  const size_t eq = assignment.find('=');
  const std::string quoted = str("--set '", text_excerpt(assignment), "'");
  MINIDL_CHECK(eq != std::string::npos && eq > 0, quoted, ": expected key.path=value");
  const std::string path = assignment.substr(0, eq), text = assignment.substr(eq + 1);
  try {
    (void)json(assignment).dump();  // config.json and checkpoints hold keys and values: UTF-8 only
  } catch (const json::exception&) {
    fail(str(quoted, ": not valid UTF-8 text"));
  }
  json value;
  if (!try_parse_json_limited(text, quoted, &value)) value = text;
  json* node = &config;
  std::string walked;
  size_t start = 0;
  for (int depth = 1;; ++depth) {
    MINIDL_CHECK(depth <= kMaxJsonDepth, quoted, ": the key path has more than ", kMaxJsonDepth, " parts");
    const size_t dot = path.find('.', start);
    const std::string key = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    MINIDL_CHECK(!key.empty(), quoted, ": empty key in the path");
    walked += (walked.empty() ? "" : ".") + text_excerpt(key);
    json* next = nullptr;
    if (node->is_array()) {
      MINIDL_CHECK(key.find_first_not_of("0123456789") == std::string::npos, quoted, ": '", walked,
                   "' indexes a list and needs a number");
      // More digits than any list has items: past the end (and no overflow parsing it).
      const size_t idx = key.size() <= 9 ? std::stoul(key) : node->size();
      MINIDL_CHECK(idx < node->size(), quoted, ": '", walked, "' is past the end of the list (", node->size(),
                   " items)");
      next = &(*node)[idx];
    } else {
      MINIDL_CHECK(node->is_object() || node->is_null(), quoted, ": '", walked,
                   "' is inside a value that is not an object");
      next = &(*node)[key];
    }
    if (dot == std::string::npos) {
      *next = value;
      return;
    }
    node = next;
    start = dot + 1;
  }
}

TrainConfig parse_train_config(const json& config) {
  // Before anything copies or prints the tree (both recurse once per level).
  check_json_depth(config, "config");
  TrainConfig c;
  JsonArgs top(config, "");
  c.seed = top.get_uint("seed", c.seed);
  c.deterministic = top.get_bool("deterministic", c.deterministic);
  c.allow_tf32 = top.get_bool("allow_tf32", c.allow_tf32);
  c.cuda_graph = top.get_bool("cuda_graph", c.cuda_graph);
  c.norm_single_read = top.get_bool("norm_single_read", c.norm_single_read);
  c.precision = top.get_string("precision", c.precision);
  c.memory_format = top.get_string("memory_format", c.memory_format);
  check_precision(c.precision, c.memory_format);
  c.device = top.get_string("device", c.device);
  c.epochs = top.get_float("epochs", c.epochs);
  MINIDL_CHECK(std::isfinite(c.epochs) && c.epochs > 0 && c.epochs <= static_cast<double>(kMaxEpochs),
               top.key_path("epochs"), ": must be > 0 (fractions allowed) and at most ", kMaxEpochs, ", got ", c.epochs);
  c.batch_size = top.get_int("batch_size", c.batch_size, 1, kMaxBatchSize);
  c.accumulate_steps = top.get_int("accumulate_steps", c.accumulate_steps, 1, kMaxBatchSize);
  MINIDL_CHECK(c.batch_size % c.accumulate_steps == 0, "accumulate_steps: ", c.accumulate_steps,
               " micro-batches do not split batch_size ", c.batch_size, " evenly");
  c.data = top.get_object("data", false);

  JsonArgs model(top.get_object("model", true), "model");
  MINIDL_CHECK(model.has("layers"), "model.layers: required list of layers is missing");
  model.get_json("layers");
  model.finish();
  c.model = config.at("model");

  JsonArgs loss(top.get_object("loss", false), "loss");
  c.label_smoothing = loss.get_float("label_smoothing", c.label_smoothing);
  MINIDL_CHECK(c.label_smoothing >= 0 && c.label_smoothing < 1, "loss.label_smoothing: must be in [0, 1), got ",
               c.label_smoothing);
  loss.finish();

  c.optimizer = top.get_object("optimizer", true);
  if (top.has("schedule")) c.schedule = top.get_object("schedule", false);
  for (const char* key : {"init", "freeze"}) {
    if (!top.has(key)) continue;
    const json& list = top.get_json(key);
    MINIDL_CHECK(list.is_array(), key, ": expected a list of rule objects, got ", list.dump());
    (std::string(key) == "init" ? c.init : c.freeze) = list;
  }
  if (top.has("lookahead")) c.lookahead = top.get_object("lookahead", false);
  if (top.has("grad_scaler")) {
    c.grad_scaler = top.get_object("grad_scaler", false);
    MINIDL_CHECK(c.precision == "fp16", "grad_scaler: loss scaling is for precision \"fp16\" only, this config's "
                 "precision is \"", c.precision, "\" (bfloat16 and float32 have float32's range and need none)");
  }

  if (top.has("grad_clip")) {
    c.grad_clip = top.get_float("grad_clip", c.grad_clip);
    MINIDL_CHECK(std::isfinite(c.grad_clip) && c.grad_clip > 0, top.key_path("grad_clip"),
                 ": the largest global gradient norm, a finite number > 0 (leave the key out for no clipping), got ",
                 c.grad_clip);
  }

  JsonArgs eval(top.get_object("eval", false), "eval");
  c.tta = eval.get_string("tta", c.tta);
  MINIDL_CHECK(c.tta == "none" || c.tta == "flip" || c.tta == "flip_translate" || c.tta == "airbench",
               "eval.tta: expected \"none\", \"flip\", \"flip_translate\" or \"airbench\", got ", json_excerpt(c.tta));
  c.eval_batch_size = eval.get_int("batch_size", c.eval_batch_size, 1, kMaxBatchSize);
  eval.finish();

  JsonArgs out(top.get_object("output", false), "output");
  c.output_dir = out.get_string("dir", c.output_dir);
  c.progress = out.get_bool("progress", c.progress);
  out.finish();

  JsonArgs ckpt(top.get_object("checkpoint", false), "checkpoint");
  c.checkpoint_every_steps = ckpt.get_int("every_steps", c.checkpoint_every_steps, 0, INT64_MAX);
  c.checkpoint_every_minutes = ckpt.get_float("every_minutes", c.checkpoint_every_minutes);
  MINIDL_CHECK(std::isfinite(c.checkpoint_every_minutes) && c.checkpoint_every_minutes >= 0 &&
                   c.checkpoint_every_minutes <= 1e6,
               "checkpoint.every_minutes: must be in 0..1000000 (0: off), got ", c.checkpoint_every_minutes);
  c.checkpoint_keep = ckpt.get_int("keep", c.checkpoint_keep, 1, 1000);
  ckpt.finish();

  JsonArgs log(top.get_object("log", false), "log");
  c.tensorboard = log.get_bool("tensorboard", c.tensorboard);
  log.finish();
  top.finish();
  return c;
}

json TrainConfig::to_json() const {
  // Whole epochs print as integers, as they were written.
  const json epochs_json = epochs == std::floor(epochs) ? json(static_cast<int64_t>(epochs)) : json(epochs);
  json j = {{"seed", seed},
          {"deterministic", deterministic},
          {"allow_tf32", allow_tf32},
          {"cuda_graph", cuda_graph},
          {"norm_single_read", norm_single_read},
          {"precision", precision},
          {"memory_format", memory_format},
          {"device", device},
          {"epochs", epochs_json},
          {"batch_size", batch_size},
          {"data", data},
          {"model", model},
          {"loss", {{"label_smoothing", label_smoothing}}},
          {"optimizer", optimizer},
          {"schedule", schedule},
          {"eval", {{"tta", tta}, {"batch_size", eval_batch_size}}},
          {"output", {{"dir", output_dir}, {"progress", progress}}},
          {"log", {{"tensorboard", tensorboard}}}};
  // Written only when set: a run of one micro-batch keeps the config.json and checkpoint it had.
  if (accumulate_steps != 1) j["accumulate_steps"] = accumulate_steps;
  if (!init.empty()) j["init"] = init;
  if (!freeze.empty()) j["freeze"] = freeze;
  if (!lookahead.is_null()) j["lookahead"] = lookahead;
  if (!grad_scaler.is_null()) j["grad_scaler"] = grad_scaler;
  if (grad_clip > 0) j["grad_clip"] = grad_clip;
  // Printed only when set: the config.json of runs with the defaults stays as it was.
  if (checkpoint_every_steps > 0 || checkpoint_every_minutes > 0 || checkpoint_keep != 1)
    j["checkpoint"] = {{"every_steps", checkpoint_every_steps},
                       {"every_minutes", checkpoint_every_minutes},
                       {"keep", checkpoint_keep}};
  return j;
}

}  // namespace minidl
