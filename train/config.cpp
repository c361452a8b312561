#include "train/config.h"

#include <fstream>
#include <set>
#include <sstream>

#include "core/error.h"

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

namespace {

// Reads keys of one JSON object with type checks and rejects keys nobody read.
class Section {
 public:
  Section(const json& j, std::string path) : j_(j), path_(std::move(path)) {
    MINIDL_CHECK(j_.is_object(), where(), ": expected an object, got ", j_.type_name());
  }
  std::string where() const { return path_.empty() ? "config" : path_; }
  std::string key_path(const std::string& k) const { return path_.empty() ? k : path_ + "." + k; }
  bool has(const std::string& k) { used_.insert(k); return j_.contains(k); }

  template <class T>
  T get(const std::string& k, const T& fallback) {
    if (!has(k)) return fallback;
    const json& v = j_.at(k);
    if constexpr (std::is_same_v<T, bool>) {
      MINIDL_CHECK(v.is_boolean(), key_path(k), ": expected true or false, got ", v.type_name());
    } else if constexpr (std::is_integral_v<T>) {
      MINIDL_CHECK(v.is_number_integer(), key_path(k), ": expected an integer, got ", v.type_name());
    } else if constexpr (std::is_floating_point_v<T>) {
      MINIDL_CHECK(v.is_number(), key_path(k), ": expected a number, got ", v.type_name());
    } else {
      MINIDL_CHECK(v.is_string(), key_path(k), ": expected a string, got ", v.type_name());
    }
    return v.get<T>();
  }
  const json& object(const std::string& k, bool required) {
    static const json empty = json::object();
    if (!has(k)) {
      MINIDL_CHECK(!required, key_path(k), ": required section is missing");
      return empty;
    }
    MINIDL_CHECK(j_.at(k).is_object(), key_path(k), ": expected an object, got ", j_.at(k).type_name());
    return j_.at(k);
  }
  void finish() const {
    for (const auto& kv : j_.items())
      MINIDL_CHECK(used_.count(kv.key()), key_path(kv.key()), ": unknown key");
  }

 private:
  const json& j_;
  std::string path_;
  std::set<std::string> used_;
};

}  // namespace

TrainConfig parse_train_config(const json& config) {
  TrainConfig c;
  Section top(config, "");
  c.seed = top.get<uint64_t>("seed", c.seed);
  c.deterministic = top.get<bool>("deterministic", c.deterministic);
  c.allow_tf32 = top.get<bool>("allow_tf32", c.allow_tf32);
  c.device = top.get<std::string>("device", c.device);
  c.epochs = top.get<int64_t>("epochs", c.epochs);
  c.batch_size = top.get<int64_t>("batch_size", c.batch_size);
  MINIDL_CHECK(c.epochs >= 1, "epochs: must be at least 1, got ", c.epochs);
  MINIDL_CHECK(c.batch_size >= 1, "batch_size: must be at least 1, got ", c.batch_size);
  c.data = top.object("data", false);

  Section model(top.object("model", true), "model");
  MINIDL_CHECK(model.has("layers"), "model.layers: required list of layers is missing");
  model.finish();
  c.model = config.at("model");

  Section loss(top.object("loss", false), "loss");
  c.label_smoothing = loss.get<double>("label_smoothing", c.label_smoothing);
  MINIDL_CHECK(c.label_smoothing >= 0 && c.label_smoothing < 1, "loss.label_smoothing: must be in [0, 1), got ",
               c.label_smoothing);
  loss.finish();

  c.optimizer = top.object("optimizer", true);
  if (config.contains("schedule")) c.schedule = top.object("schedule", false);
  else top.has("schedule");

  Section eval(top.object("eval", false), "eval");
  c.tta = eval.get<std::string>("tta", c.tta);
  MINIDL_CHECK(c.tta == "none" || c.tta == "flip" || c.tta == "flip_translate",
               "eval.tta: expected \"none\", \"flip\" or \"flip_translate\", got \"", c.tta, "\"");
  c.eval_batch_size = eval.get<int64_t>("batch_size", c.eval_batch_size);
  MINIDL_CHECK(c.eval_batch_size >= 1, "eval.batch_size: must be at least 1");
  eval.finish();

  Section out(top.object("output", false), "output");
  c.output_dir = out.get<std::string>("dir", c.output_dir);
  c.progress = out.get<bool>("progress", c.progress);
  out.finish();
  top.finish();
  return c;
}

json TrainConfig::to_json() const {
  return {{"seed", seed},
          {"deterministic", deterministic},
          {"allow_tf32", allow_tf32},
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
