// The kinds of rows of a typed schema (core/fields.h), one function per kind of member: flag
// (bool), integer (int64_t in a range), count (uint64_t), number (double in an interval),
// float32 (float), text (std::string), choice (a named enum, core/enum_names.h), int_list
// (std::vector<int64_t>), section (a struct with fields of its own), plus modifiers: derived (a
// default computed from keys read before it) and written_when_set. Each takes the key's name, the
// member, its default (or kRequired), its range, and its meaning:
//   integer("num_groups", &GroupNormSpec::num_groups, kRequired, {1, kMaxFeatures}, "groups")
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/enum_names.h"
#include "core/error.h"
#include "core/fields.h"

namespace minidl {

struct RequiredKey {};
inline constexpr RequiredKey kRequired{};

// A key's default, or kRequired.
template <typename V>
struct Default {
  Default(RequiredKey) {}                // NOLINT(google-explicit-constructor)
  Default(V v) : value(std::move(v)) {}  // NOLINT(google-explicit-constructor)
  template <typename U = V, typename = std::enable_if_t<std::is_same<U, std::string>::value>>
  Default(const char* v) : value(std::string(v)) {}  // NOLINT(google-explicit-constructor)
  std::optional<V> value;
};

// Keeps a parameter out of template argument deduction (the member pointer decides the type).
template <typename X>
struct same_type {
  using type = X;
};
template <typename X>
using Same = typename same_type<X>::type;

// An integer range, both ends included.
struct IntRange {
  int64_t lo = std::numeric_limits<int64_t>::min();
  int64_t hi = std::numeric_limits<int64_t>::max();
  bool contains(int64_t v) const { return v >= lo && v <= hi; }
  std::string text() const;  // "1..65536", ">= 0", "" (any)
};

// A number range; hi = infinity: no upper bound.
struct Interval {
  double lo = -std::numeric_limits<double>::infinity();
  bool lo_open = false;
  double hi = std::numeric_limits<double>::infinity();
  bool hi_open = false;
  bool contains(double v) const;
  std::string text() const;  // "[0, 1]", "(0, 1000000]", ">= 0", "> 0", "" (any)
};
constexpr double kUnbounded = std::numeric_limits<double>::infinity();
inline constexpr Interval kAtLeastZero{0, false, kUnbounded, false};
inline constexpr Interval kUnitInterval{0, false, 1, false};

// An error for a value outside its range: "eps: expected a number >= 0, got -1", "stride:
// expected an integer in 1..65536, got 0"; `what` is "an integer", "a number", ...
[[noreturn]] void fail_range(const JsonArgs& args, const std::string& key, const char* what, const std::string& range,
                             const std::string& got);

// A row whose reader and writer the caller sets, for a key that is not one member of one kind
// (two keys into one member, a key built into modules); `fallback` null: required.
template <typename T>
Field<T> custom_field(const std::string& name, const char* type, nlohmann::json fallback, std::string range,
                      std::string doc) {
  Field<T> f;
  f.name = name;
  f.type = type;
  f.required = fallback.is_null();
  f.default_value = std::move(fallback);
  f.range = std::move(range);
  f.doc = std::move(doc);
  return f;
}

template <typename T>
Field<T> written_when_set(Field<T> f) {
  f.written_at_default = false;
  return f;
}

namespace detail {

template <typename V>
nlohmann::json json_of(const Default<V>& fallback) {
  return fallback.value ? nlohmann::json(*fallback.value) : nlohmann::json();
}

}  // namespace detail

template <typename T>
Field<T> flag(const std::string& name, bool T::*member, Default<bool> fallback, std::string doc) {
  Field<T> f = custom_field<T>(name, "bool", detail::json_of(fallback), "", std::move(doc));
  f.read = [member, fallback](JsonArgs& a, const std::string& key, T& out) {
    out.*member = fallback.value ? a.get_bool(key, *fallback.value) : a.get_bool(key);
  };
  f.write = [member](const T& in) { return nlohmann::json(in.*member); };
  return f;
}

// An integer member of any width (int64_t, int): `range` must fit it.
template <typename T, typename I,
          typename = std::enable_if_t<std::is_integral<I>::value && !std::is_same<I, bool>::value>>
Field<T> integer(const std::string& name, I T::*member, Default<int64_t> fallback, IntRange range, std::string doc) {
  Field<T> f = custom_field<T>(name, "int", detail::json_of(fallback), range.text(), std::move(doc));
  f.read = [member, fallback, range](JsonArgs& a, const std::string& key, T& out) {
    const int64_t v = fallback.value ? a.get_int(key, *fallback.value) : a.get_int(key);
    if (!range.contains(v)) fail_range(a, key, "an integer", range.text(), std::to_string(v));
    out.*member = static_cast<I>(v);
  };
  f.write = [member](const T& in) { return nlohmann::json(in.*member); };
  return f;
}

// A non-negative integer up to 2^64 - 1 (a seed).
template <typename T>
Field<T> count(const std::string& name, uint64_t T::*member, uint64_t fallback, std::string doc) {
  Field<T> f = custom_field<T>(name, "int", fallback, ">= 0", std::move(doc));
  f.read = [member, fallback](JsonArgs& a, const std::string& key, T& out) { out.*member = a.get_uint(key, fallback); };
  f.write = [member](const T& in) { return nlohmann::json(in.*member); };
  return f;
}

// A finite number in `range`; `note` follows the range in docs and errors ("0: off").
template <typename T>
Field<T> number(const std::string& name, double T::*member, Default<double> fallback, Interval range, std::string doc,
                const std::string& note = "") {
  const std::string allowed = range.text().empty() ? note : range.text() + (note.empty() ? "" : " (" + note + ")");
  Field<T> f = custom_field<T>(name, "float", detail::json_of(fallback), allowed, std::move(doc));
  f.read = [member, fallback, range, allowed](JsonArgs& a, const std::string& key, T& out) {
    const double v = fallback.value ? a.get_float(key, *fallback.value) : a.get_float(key);
    if (!range.contains(v)) fail_range(a, key, "a number", allowed, str(v));
    out.*member = v;
  };
  f.write = [member](const T& in) { return nlohmann::json(in.*member); };
  return f;
}

// A number kept as float32: it must fit float32's range, where it is used.
template <typename T>
Field<T> float32(const std::string& name, float T::*member, Default<float> fallback, std::string doc) {
  Field<T> f = custom_field<T>(name, "float", detail::json_of(fallback), "|value| <= 3.4e38", std::move(doc));
  f.read = [member, fallback](JsonArgs& a, const std::string& key, T& out) {
    const double v = fallback.value ? a.get_float(key, *fallback.value) : a.get_float(key);
    if (!(std::abs(v) <= std::numeric_limits<float>::max()))
      fail_range(a, key, "a finite float32 number", "|value| <= 3.4e38", str(v));
    out.*member = static_cast<float>(v);
  };
  f.write = [member](const T& in) { return nlohmann::json(in.*member); };
  return f;
}

// A string; `allowed` says what it may be, for the docs (checked where it is used).
template <typename T>
Field<T> text(const std::string& name, std::string T::*member, Default<std::string> fallback, std::string allowed,
              std::string doc) {
  Field<T> f = custom_field<T>(name, "string", detail::json_of(fallback), std::move(allowed), std::move(doc));
  f.read = [member, fallback](JsonArgs& a, const std::string& key, T& out) {
    out.*member = fallback.value ? a.get_string(key, *fallback.value) : a.get_string(key);
  };
  f.write = [member](const T& in) { return nlohmann::json(in.*member); };
  return f;
}

// One of E's names (core/enum_names.h).
template <typename T, typename E>
Field<T> choice(const std::string& name, E T::*member, Default<Same<E>> fallback, std::string doc) {
  Field<T> f = custom_field<T>(name, "string", fallback.value ? nlohmann::json(to_string(*fallback.value)) : nullptr,
                               enum_choices<E>(), std::move(doc));
  f.read = [member, fallback](JsonArgs& a, const std::string& key, T& out) {
    const std::string v = fallback.value ? a.get_string(key, to_string(*fallback.value)) : a.get_string(key);
    out.*member = from_string<E>(v, a.key_path(key));
  };
  f.write = [member](const T& in) { return nlohmann::json(to_string(in.*member)); };
  return f;
}

// "auto" (std::nullopt: chosen later from what only the run knows) or one of E's names; "auto"
// is the default.
template <typename T, typename E>
Field<T> choice_or_auto(const std::string& name, std::optional<E> T::*member, std::string doc) {
  Field<T> f = custom_field<T>(name, "string", "auto", enum_choices_or_auto<E>(), std::move(doc));
  f.read = [member](JsonArgs& a, const std::string& key, T& out) {
    out.*member = from_string_or_auto<E>(a.get_string(key, "auto"), a.key_path(key));
  };
  f.write = [member](const T& in) { return nlohmann::json(to_string_or_auto(in.*member)); };
  return f;
}

// An integer or a list of integers, each in `range`; written back as a list.
template <typename T>
Field<T> int_list(const std::string& name, std::vector<int64_t> T::*member, IntRange range, std::string doc) {
  Field<T> f = custom_field<T>(name, "ints", nullptr, range.text(), std::move(doc));
  f.read = [member, range](JsonArgs& a, const std::string& key, T& out) {
    const std::vector<int64_t> v = a.get_ints(key);
    for (int64_t x : v)
      if (!range.contains(x)) fail_range(a, key, "integers", range.text(), nlohmann::json(v).dump());
    out.*member = v;
  };
  f.write = [member](const T& in) { return nlohmann::json(in.*member); };
  return f;
}

// A list of numbers; left out it is empty (and so left out when written back); given, it holds at
// least one number.
template <typename T>
Field<T> number_list(const std::string& name, std::vector<double> T::*member, std::string doc) {
  Field<T> f = written_when_set(custom_field<T>(name, "floats", nlohmann::json::array(), "", std::move(doc)));
  f.read = [member](JsonArgs& a, const std::string& key, T& out) {
    (out.*member).clear();
    if (!a.has(key)) return;
    const nlohmann::json& j = a.get_json(key);
    MINIDL_CHECK(j.is_array() && !j.empty(), a.key_path(key), ": expected a non-empty list of numbers, got ",
                 json_excerpt(j));
    for (size_t i = 0; i < j.size(); ++i) {
      MINIDL_CHECK(j[i].is_number(), a.key_path(key), "[", i, "]: expected a number, got ", json_excerpt(j[i]));
      (out.*member).push_back(j[i].get<double>());
    }
  };
  f.write = [member](const T& in) { return nlohmann::json(in.*member); };
  return f;
}

// A number in `range` that may be left out (std::nullopt: "not set", and so left out when written
// back).
template <typename T>
Field<T> optional_number(const std::string& name, std::optional<double> T::*member, Interval range, std::string doc) {
  Field<T> f = written_when_set(custom_field<T>(name, "float", nullptr, range.text(), std::move(doc)));
  f.required = false;
  f.read = [member, range](JsonArgs& a, const std::string& key, T& out) {
    out.*member = std::nullopt;
    if (!a.has(key)) return;
    const double v = a.get_float(key);
    if (!range.contains(v)) fail_range(a, key, "a number", range.text(), str(v));
    out.*member = v;
  };
  f.write = [member](const T& in) { return in.*member ? std::optional<nlohmann::json>(*(in.*member)) : std::nullopt; };
  return f;
}

// A list of objects, each read through `fields` at "key[i]"; left out: empty (written back as []).
template <typename T, typename E>
Field<T> object_list(const std::string& name, std::vector<E> T::*member, const Fields<E>& fields, std::string doc) {
  Field<T> f = custom_field<T>(name, "list", nlohmann::json::array(), "", std::move(doc));
  f.children = field_infos(fields);
  f.read = [member, &fields](JsonArgs& a, const std::string& key, T& out) {
    (out.*member).clear();
    if (!a.has(key)) return;
    const nlohmann::json& list = a.get_json(key);
    MINIDL_CHECK(list.is_array(), a.key_path(key), ": expected a list of objects, got ", json_excerpt(list));
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string path = str(a.key_path(key), "[", i, "]");
      MINIDL_CHECK(list[i].is_object(), path, ": expected an object, got ", json_excerpt(list[i]));
      JsonArgs args(list[i], path);
      (out.*member).push_back(read_struct(fields, args));
    }
  };
  f.write = [member, &fields](const T& in) {
    nlohmann::json list = nlohmann::json::array();
    for (const E& e : in.*member) list.push_back(write_fields(fields, e));
    return std::optional<nlohmann::json>(list);
  };
  return f;
}

// An object whose keys are the rows of `fields`; absent: every key's default.
template <typename T, typename S>
Field<T> section(const std::string& name, S T::*member, const Fields<S>& fields, std::string doc) {
  Field<T> f = custom_field<T>(name, "object", nlohmann::json::object(), "", std::move(doc));
  f.children = field_infos(fields);
  f.read = [member, &fields](JsonArgs& a, const std::string& key, T& out) {
    JsonArgs args(a.get_object(key, false), a.key_path(key));
    out.*member = S{};
    read_fields(fields, args, out.*member);
  };
  f.write = [member, &fields](const T& in) { return write_fields(fields, in.*member); };
  return f;
}

// `f` with no fixed default: left out, the member is `fallback` of the keys read before it (the
// meaning says how). `f` is built with kRequired.
template <typename T, typename V>
Field<T> derived(Field<T> f, V T::*member, V (*fallback)(const T&)) {
  f.required = false;
  f.default_value = nullptr;
  auto read = f.read;
  f.read = [read, member, fallback](JsonArgs& a, const std::string& key, T& out) {
    if (a.has(key)) {
      read(a, key, out);
    } else {
      out.*member = fallback(out);
    }
  };
  return f;
}

}  // namespace minidl
