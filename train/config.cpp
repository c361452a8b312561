#include "train/config.h"

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/json_args.h"
#include "train/precision.h"

namespace minidl {

using nlohmann::json;

json read_json_file(const std::string& path) {
  std::ifstream in(path);
  MINIDL_CHECK(in.good(), "cannot open config file '", path, "'");
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return json::parse(ss.str());
  } catch (const json::parse_error& e) {
    fail(str("config file '", path, "' is not valid JSON: ", e.what()));
  }
}

void apply_override(json& config, const std::string& assignment) {
  const size_t eq = assignment.find('=');
  MINIDL_CHECK(eq != std::string::npos && eq > 0, "--set '", assignment, "': expected key.path=value");
  const std::string path = assignment.substr(0, eq), text = assignment.substr(eq + 1);
  json value;
  try {
    value = json::parse(text);
  } catch (const json::parse_error&) {
    value = text;
  }
  json* node = &config;
  std::string walked;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string key = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    MINIDL_CHECK(!key.empty(), "--set '", assignment, "': empty key in the path");
    walked += (walked.empty() ? "" : ".") + key;
    json* next = nullptr;
    if (node->is_array()) {
      MINIDL_CHECK(key.find_first_not_of("0123456789") == std::string::npos, "--set '", assignment, "': '",
                   walked, "' indexes a list and needs a number");
      const size_t idx = std::stoul(key);
      MINIDL_CHECK(idx < node->size(), "--set '", assignment, "': '", walked, "' is past the end of the list");
      next = &(*node)[idx];
    } else {
      MINIDL_CHECK(node->is_object() || node->is_null(), "--set '", assignment, "': '", walked,
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
  c.epochs = top.get_int("epochs", c.epochs);
  c.batch_size = top.get_int("batch_size", c.batch_size);
  MINIDL_CHECK(c.epochs >= 1, "epochs: must be at least 1, got ", c.epochs);
  MINIDL_CHECK(c.batch_size >= 1, "batch_size: must be at least 1, got ", c.batch_size);
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

  JsonArgs eval(top.get_object("eval", false), "eval");
  c.tta = eval.get_string("tta", c.tta);
  MINIDL_CHECK(c.tta == "none" || c.tta == "flip" || c.tta == "flip_translate",
               "eval.tta: expected \"none\", \"flip\" or \"flip_translate\", got \"", c.tta, "\"");
  c.eval_batch_size = eval.get_int("batch_size", c.eval_batch_size);
  MINIDL_CHECK(c.eval_batch_size >= 1, "eval.batch_size: must be at least 1");
  eval.finish();

  JsonArgs out(top.get_object("output", false), "output");
  c.output_dir = out.get_string("dir", c.output_dir);
  c.progress = out.get_bool("progress", c.progress);
  out.finish();
  top.finish();
  return c;
}

json TrainConfig::to_json() const {
  return {{"seed", seed},
          {"deterministic", deterministic},
          {"allow_tf32", allow_tf32},
          {"cuda_graph", cuda_graph},
          {"norm_single_read", norm_single_read},
          {"precision", precision},
          {"memory_format", memory_format},
          {"device", device},
          {"epochs", epochs},
          {"batch_size", batch_size},
          {"data", data},
          {"model", model},
          {"loss", {{"label_smoothing", label_smoothing}}},
          {"optimizer", optimizer},
          {"schedule", schedule},
          {"eval", {{"tta", tta}, {"batch_size", eval_batch_size}}},
          {"output", {{"dir", output_dir}, {"progress", progress}}}};
}

}  // namespace minidl
