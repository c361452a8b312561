// The run config's keys, one table: each row is a key's path, type, default, allowed values,
// meaning and, for a section another part of minidl parses (data, model, optimizer, ...), where
// its own keys are documented. parse_train_config reads every key through its row (so the default
// it fills in and the range it checks are the ones printed), TrainConfig::to_json writes every
// key through its row, and `minidl config --doc` prints the table as docs/config.md.
#pragma once
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/json_args.h"
#include "train/config.h"

namespace minidl {

struct ConfigKey {
  std::string path;              // "eval.tta": the key, after its section when it has one
  std::string type;              // "bool", "integer", "number", "string", "object" or "list"
  nlohmann::json default_value;  // what a missing key means (null: required, or off)
  bool required = false;
  std::string allowed;        // the allowed values or range, as docs and error messages say them
  std::string meaning;        // one line
  std::string documented_in;  // for a section parsed elsewhere: where its keys are documented
  // false: config.json leaves the key out while it holds its default (a run written before the
  // key existed keeps its config.json and checkpoint metadata); a section of only such keys is
  // left out whole while they all hold their defaults.
  bool written_at_default = true;
  // Reads the key (named `key` in `args`, the key's section) into the config, checking it.
  std::function<void(JsonArgs& args, const std::string& key, TrainConfig& c)> read;
  std::function<nlohmann::json(const TrainConfig& c)> write;

  std::string section() const;  // "eval" for "eval.tta", "" for a top-level key
  std::string name() const;     // "tta" for "eval.tta"
};

// Every key, in the order of docs/config.md.
const std::vector<ConfigKey>& config_keys();

// docs/config.md: the table as a Markdown reference.
std::string config_reference_markdown();

}  // namespace minidl
