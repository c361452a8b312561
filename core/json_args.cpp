#include "core/json_args.h"

#include <cmath>

#include "core/error.h"
#include "core/json_limits.h"
#include "core/spelling.h"

namespace minidl {

JsonArgs::JsonArgs(const nlohmann::json& object, std::string path) : object_(object), path_(std::move(path)) {
  MINIDL_CHECK(object_.is_object(), where(), ": expected a JSON object, got ", object_.type_name());
}

bool JsonArgs::has(const std::string& key) const {
  asked_.insert(key);
  return object_.contains(key);
}

const nlohmann::json& JsonArgs::at(const std::string& key) {
  used_.insert(key);
  MINIDL_CHECK(object_.contains(key), key_path(key), ": required key is missing");
  return object_.at(key);
}

namespace {

// An integer that fits int64 (nlohmann keeps values above INT64_MAX as unsigned: those would wrap).
bool is_int64(const nlohmann::json& v) {
  return v.is_number_integer() &&
         (!v.is_number_unsigned() || v.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX));
}

std::string describe(const nlohmann::json& v) {
  return v.is_number() ? json_excerpt(v) : std::string(v.type_name());
}

}  // namespace

int64_t JsonArgs::get_int(const std::string& key) {
  const nlohmann::json& v = at(key);
  MINIDL_CHECK(is_int64(v), key_path(key), ": expected an integer",
               v.is_number_integer() ? " that fits in 64 bits" : "", ", got ", describe(v));
  return v.get<int64_t>();
}

int64_t JsonArgs::get_int(const std::string& key, int64_t fallback, int64_t lo, int64_t hi) {
  const int64_t v = get_int(key, fallback);
  MINIDL_CHECK(v >= lo && v <= hi, key_path(key), ": expected an integer in ", lo, "..", hi, ", got ", v);
  return v;
}

int64_t JsonArgs::get_int(const std::string& key, int64_t fallback) {
  used_.insert(key);
  return has(key) ? get_int(key) : fallback;
}

uint64_t JsonArgs::get_uint(const std::string& key, uint64_t fallback) {
  used_.insert(key);
  if (!has(key)) return fallback;
  const nlohmann::json& v = at(key);
  MINIDL_CHECK(v.is_number_unsigned(), key_path(key), ": expected a non-negative integer, got ", describe(v));
  return v.get<uint64_t>();
}

double JsonArgs::get_float(const std::string& key) {
  const nlohmann::json& v = at(key);
  MINIDL_CHECK(v.is_number(), key_path(key), ": expected a number, got ", v.type_name());
  const double d = v.get<double>();
  MINIDL_CHECK(std::isfinite(d), key_path(key), ": expected a finite number, got ", d);
  return d;
}

double JsonArgs::get_float(const std::string& key, double fallback) {
  used_.insert(key);
  return has(key) ? get_float(key) : fallback;
}

bool JsonArgs::get_bool(const std::string& key) {
  const nlohmann::json& v = at(key);
  MINIDL_CHECK(v.is_boolean(), key_path(key), ": expected true or false, got ", v.type_name());
  return v.get<bool>();
}

bool JsonArgs::get_bool(const std::string& key, bool fallback) {
  used_.insert(key);
  return has(key) ? get_bool(key) : fallback;
}

std::string JsonArgs::get_string(const std::string& key) {
  const nlohmann::json& v = at(key);
  MINIDL_CHECK(v.is_string(), key_path(key), ": expected a string, got ", v.type_name());
  return v.get<std::string>();
}

std::string JsonArgs::get_string(const std::string& key, const std::string& fallback) {
  used_.insert(key);
  return has(key) ? get_string(key) : fallback;
}

std::vector<int64_t> JsonArgs::get_ints(const std::string& key) {
  const nlohmann::json& v = at(key);
  if (v.is_number_integer()) return {get_int(key)};
  MINIDL_CHECK(v.is_array() && !v.empty(), key_path(key), ": expected an integer or a list of integers, got ",
               v.type_name());
  std::vector<int64_t> out;
  for (const auto& e : v) {
    MINIDL_CHECK(is_int64(e), key_path(key), ": expected integers (64-bit) in the list, got ", describe(e));
    out.push_back(e.get<int64_t>());
  }
  return out;
}

const nlohmann::json& JsonArgs::get_json(const std::string& key) { return at(key); }

const nlohmann::json& JsonArgs::get_object(const std::string& key, bool required) {
  static const nlohmann::json empty = nlohmann::json::object();
  used_.insert(key);
  if (!has(key)) {
    MINIDL_CHECK(!required, key_path(key), ": required section is missing");
    return empty;
  }
  const nlohmann::json& v = object_.at(key);
  MINIDL_CHECK(v.is_object(), key_path(key), ": expected an object, got ", v.type_name());
  return v;
}

void JsonArgs::finish() const {
  for (const auto& kv : object_.items()) {
    if (used_.count(kv.key())) continue;
    std::set<std::string> keys = used_;
    keys.insert(asked_.begin(), asked_.end());
    std::string known;
    for (const auto& k : keys) known += (known.empty() ? "" : ", ") + k;
    fail(str(key_path(text_excerpt(kv.key())), ": unknown key",
             did_you_mean(kv.key(), std::vector<std::string>(keys.begin(), keys.end())), " (known: ", known, ")"));
  }
}

}  // namespace minidl
