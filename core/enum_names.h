// Names of a closed set of choices (a config's "precision", "eval.tta", ...): each enum lists its
// values and their names once, in an EnumNames specialization beside it, and to_string,
// from_string, the error for an unknown name and the JSON form all read that list, so logs,
// config.json, error messages and docs/config.md spell a value the same way.
#pragma once
#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "core/json_limits.h"

namespace minidl {

template <typename E>
struct EnumName {
  E value;
  const char* name;
};

// Specialized for each named enum: static constexpr EnumName<E> values[] = {{E::A, "a"}, ...};
template <typename E>
struct EnumNames;

template <typename E, typename = void>
struct has_enum_names : std::false_type {};
template <typename E>
struct has_enum_names<E, std::void_t<decltype(EnumNames<E>::values)>> : std::true_type {};

template <typename E, typename = std::enable_if_t<has_enum_names<E>::value>>
const char* to_string(E value) {
  for (const EnumName<E>& n : EnumNames<E>::values)
    if (n.value == value) return n.name;
  fail(str("enum value ", static_cast<long long>(value), " has no name"));
}

// The names in order: {"none", "flip", ...}.
template <typename E>
std::vector<std::string> enum_names() {
  std::vector<std::string> names;
  for (const EnumName<E>& n : EnumNames<E>::values) names.emplace_back(n.name);
  return names;
}

// The names quoted for messages and docs: "a", "b" or "c".
template <typename E>
std::string enum_choices() {
  const std::vector<std::string> names = enum_names<E>();
  std::string text;
  for (size_t i = 0; i < names.size(); ++i)
    text += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + ("\"" + names[i] + "\"");
  return text;
}

// The value named `text`; anything else is an error naming `key` and the choices:
//   precision: expected "fp32", "bf16" or "fp16", got "fp8"
template <typename E>
E from_string(const std::string& text, const std::string& key) {
  for (const EnumName<E>& n : EnumNames<E>::values)
    if (text == n.name) return n.value;
  fail(str(key, ": expected ", enum_choices<E>(), ", got \"", text_excerpt(text), "\""));
}

// A choice that may be left to minidl ("precision": "auto"): "auto" is std::nullopt, chosen
// later from what only the run knows (its device). The names with "auto" first, for messages and
// docs: "auto", "a", "b" or "c".
template <typename E>
std::string enum_choices_or_auto() {
  return "\"auto\", " + enum_choices<E>();
}

// "auto" (nullopt) or the value named `text`; anything else is an error naming `key` and the
// choices: precision: expected "auto", "fp32", "bf16" or "fp16", got "fp8"
template <typename E>
std::optional<E> from_string_or_auto(const std::string& text, const std::string& key) {
  if (text == "auto") return std::nullopt;
  for (const EnumName<E>& n : EnumNames<E>::values)
    if (text == n.name) return n.value;
  fail(str(key, ": expected ", enum_choices_or_auto<E>(), ", got \"", text_excerpt(text), "\""));
}

template <typename E, typename = std::enable_if_t<has_enum_names<E>::value>>
std::string to_string_or_auto(const std::optional<E>& value) {
  return value ? to_string(*value) : "auto";
}

// A named enum goes into JSON as its name (nlohmann would otherwise write the underlying integer).
template <typename E, typename = std::enable_if_t<has_enum_names<E>::value>>
void to_json(nlohmann::json& j, E value) {
  j = to_string(value);
}

}  // namespace minidl
