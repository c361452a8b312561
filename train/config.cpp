#include "train/config.h"

#include "core/error.h"
#include "core/json_args.h"
#include "core/json_limits.h"
#include "train/config_keys.h"

namespace minidl {

using nlohmann::json;

json read_json_file(const std::string& path) {
  const std::string what = str("config file '", path, "'");
  json j = parse_json_limited(read_file_limited(path, "config file"), what);
  MINIDL_CHECK(j.is_object(), what, ": expected a JSON object {...} at the top level, got ", j.type_name());
  return j;
}

namespace {

// Whether `t` is written as a JSON number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][-+]?[0-9]+)?
bool is_json_number_text(const std::string& t) {
  size_t i = 0;
  auto digits = [&] {
    const size_t from = i;
    while (i < t.size() && t[i] >= '0' && t[i] <= '9') ++i;
    return i > from;
  };
  if (i < t.size() && t[i] == '-') ++i;
  if (i < t.size() && t[i] == '0') {
    ++i;
  } else if (!digits()) {
    return false;
  }
  if (i < t.size() && t[i] == '.' && (++i, !digits())) return false;
  if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
    ++i;
    if (i < t.size() && (t[i] == '+' || t[i] == '-')) ++i;
    if (!digits()) return false;
  }
  return i == t.size();
}

}  // namespace

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
  if (!try_parse_json_limited(text, quoted, &value)) {
    // Text that is not JSON is a string value, unless it is written as a number: one that does not
    // parse is out of range (1e400), and as a string it would be reported as the wrong type.
    MINIDL_CHECK(!is_json_number_text(text), quoted, ": the number is out of range (a JSON number is a ",
                 "double: at most about 1.8e308)");
    value = text;
  }
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
  JsonArgs top(config, "");
  return read_struct(config_keys(), top);
}

TrainConfig resolve_for_device(TrainConfig config, Device device) {
  if (!config.precision) config.precision = auto_precision(device.type, compute_capability(device));
  // A language model's activations are (B, T, D): no layout but the contiguous one.
  const bool tokens = config.data.is_object() && config.data.value("format", "") == "tokens";
  if (!config.memory_format) config.memory_format = tokens ? MemoryFormat::Contiguous : auto_memory_format(device.type);
  return config;
}

json TrainConfig::to_json() const { return write_fields(config_keys(), *this); }

}  // namespace minidl
