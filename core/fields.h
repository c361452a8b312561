// One typed schema for every struct a JSON object fills (a layer's spec, a config section): each
// key is one row, Field<T>, naming the key, the member it fills, its default, its range or
// values and its meaning. Reading (defaults filled in, ranges checked, errors naming the key's
// path, unknown keys refused), writing back (config.json, a module's to_json) and the
// documentation (docs/config.md, docs/layers.json) all come from the rows, so a key is written
// once. The kinds of rows (flag, integer, number, choice, ...) are in core/field_kinds.h.
#pragma once
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/json_args.h"

namespace minidl {

// What a key is, whatever struct it fills: what docs and schemas print.
struct FieldInfo {
  // "eps"; "eval.tta" for the key "tta" of the section "eval" (an object of its own in the JSON).
  std::string name;
  std::string type;  // "int", "float", "bool", "string", "ints", "layers", "object" or "list"
  bool required = false;
  // What a missing key means; null and not required: a default derived from other keys (the
  // meaning says how), or the key is off.
  nlohmann::json default_value;
  std::string range;  // the allowed values or range as messages say them ("1..2147483648", "[0, 1]")
  std::string doc;    // the meaning, one line
  // false: written back only when it differs from its default, so the JSON of objects written
  // before the key existed stays as it was; a section of only such keys is left out whole while
  // they all hold their defaults.
  bool written_at_default = true;
  // The rows of a nested object this key holds, for the docs (a typed section: "data.augment").
  std::vector<FieldInfo> children;
  // Where an object's "type" picks its kind: the type this key belongs to ("cosine"); "": any.
  std::string variant;

  std::string section() const;  // "eval" for "eval.tta", "" for a key at the top
  std::string key() const;      // "tta" for "eval.tta"
};

template <typename T>
struct Field : FieldInfo {
  // Reads the key `key` of `args` (the key's own object) into `out`, checking its range.
  std::function<void(JsonArgs& args, const std::string& key, T& out)> read;
  // The value written back; nullopt: the key is left out.
  std::function<std::optional<nlohmann::json>(const T& in)> write;
};

template <typename T>
struct Fields {
  using Check = std::function<void(const T& value, const JsonArgs& args)>;
  Fields() = default;
  explicit Fields(std::vector<Field<T>> rows, Check rules = nullptr) : keys(std::move(rows)), check(std::move(rules)) {}

  std::vector<Field<T>> keys;
  // The rules between keys, checked once every key is read; errors name `args`' key paths.
  Check check;
};

// The rows without their member access: what a descriptor keeps and the docs print.
template <typename T>
std::vector<FieldInfo> field_infos(const Fields<T>& fields) {
  return std::vector<FieldInfo>(fields.keys.begin(), fields.keys.end());
}

// Reads every key of `fields` from `args` into `out`, refuses keys nobody read (finish), then
// checks the rules between keys. Keys of a section are read from the section's object.
template <typename T>
void read_fields(const Fields<T>& fields, JsonArgs& args, T& out) {
  std::vector<std::pair<std::string, JsonArgs>> sections;  // in the order their keys come
  for (const Field<T>& f : fields.keys) {
    JsonArgs* where = &args;
    const std::string section = f.section();
    if (!section.empty()) {
      auto it = sections.begin();
      while (it != sections.end() && it->first != section) ++it;
      if (it == sections.end()) {
        sections.emplace_back(section, JsonArgs(args.get_object(section, false), args.key_path(section)));
        it = sections.end() - 1;
      }
      where = &it->second;
    }
    f.read(*where, f.key(), out);
  }
  for (const auto& s : sections) s.second.finish();
  args.finish();
  if (fields.check) fields.check(out, args);
}

// A struct read from the object `args` holds, defaults filled in.
template <typename T>
T read_struct(const Fields<T>& fields, JsonArgs& args) {
  T out{};
  read_fields(fields, args, out);
  return out;
}

// `value` as JSON: every key its row writes. A key written only when set is left out at its
// default. A section of such keys only is written whole once any of its keys is, and left out
// otherwise; a section that also holds keys written at their default is always written, its keys
// written only when set left out at their defaults (so a key added to it later leaves the JSON of
// objects that do not set it as it was).
template <typename T>
nlohmann::json write_fields(const Fields<T>& fields, const T& value) {
  auto written = [](const Field<T>& f, const std::optional<nlohmann::json>& v) {
    return v && (f.written_at_default || *v != f.default_value);
  };
  std::map<std::string, bool> section_written, section_always;
  for (const Field<T>& f : fields.keys) {
    if (f.section().empty()) continue;
    section_written[f.section()] |= written(f, f.write(value));
    section_always[f.section()] |= f.written_at_default;
  }
  nlohmann::json j = nlohmann::json::object();
  for (const Field<T>& f : fields.keys) {
    const std::optional<nlohmann::json> v = f.write(value);
    if (f.section().empty()) {
      if (written(f, v)) j[f.name] = *v;
    } else if (section_written[f.section()] && v && (!section_always[f.section()] || written(f, v))) {
      j[f.section()][f.key()] = *v;
    }
  }
  return j;
}

// The rows as a JSON list: [{"name", "type", "required", "default" (when fixed), "range" (when
// bounded), "doc"}], docs/layers.json's form of a layer's keys.
nlohmann::json fields_schema(const std::vector<FieldInfo>& fields);

}  // namespace minidl
