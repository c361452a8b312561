// The one strict reader of JSON arguments: layer specs, optimizers, schedules, data options and
// the run config all read their keys through it. Keys come with defaults and type checks, every
// error names the full key path ("model.layers[3].kernel_size", "optimizer.betas"), and finish()
// rejects any key nobody read, so a typo is an error instead of a silently ignored setting.
// Integers never wrap: a value outside int64 (or below 0 for get_uint) is an error, and values
// quoted in messages are short excerpts (core/json_limits.h).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

namespace minidl {

class JsonArgs {
 public:
  // `path` is where the object sits in the config ("" for the top level, named "config").
  JsonArgs(const nlohmann::json& object, std::string path);

  int64_t get_int(const std::string& key);
  int64_t get_int(const std::string& key, int64_t fallback);
  // An integer in [lo, hi]; anything outside (or past int64) is an error naming the key and range.
  int64_t get_int(const std::string& key, int64_t fallback, int64_t lo, int64_t hi);
  uint64_t get_uint(const std::string& key, uint64_t fallback);
  double get_float(const std::string& key);
  double get_float(const std::string& key, double fallback);
  bool get_bool(const std::string& key);
  bool get_bool(const std::string& key, bool fallback);
  std::string get_string(const std::string& key);
  std::string get_string(const std::string& key, const std::string& fallback);
  std::vector<int64_t> get_ints(const std::string& key);  // a number or a list of numbers
  const nlohmann::json& get_json(const std::string& key);
  // A nested object; an empty one when it is absent and not required.
  const nlohmann::json& get_object(const std::string& key, bool required);
  // Whether the key is present; a key asked about is a known one (finish() lists it).
  bool has(const std::string& key) const;

  const std::string& path() const { return path_; }
  std::string where() const { return path_.empty() ? "config" : path_; }
  std::string key_path(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  // Errors naming the first key nobody read.
  void finish() const;

 private:
  const nlohmann::json& at(const std::string& key);
  const nlohmann::json& object_;
  std::string path_;
  std::set<std::string> used_;
  mutable std::set<std::string> asked_;  // by has(): optional keys read only when present
};

}  // namespace minidl
