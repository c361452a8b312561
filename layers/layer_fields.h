// Kinds of spec rows only layers have (core/field_kinds.h has the rest): a (height, width) pair,
// a (depth, height, width) triple and a list of layer specs, built into the container's children.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/field_kinds.h"
#include "layers/module.h"
#include "layers/registry.h"
#include "layers/size2d.h"
#include "layers/size3d.h"

namespace minidl {

using Modules = std::vector<std::shared_ptr<Module>>;

namespace layer_fields_detail {

// A window's size from an int (every dimension) or a list of one value per dimension, its values,
// and its spec form and text (layers/size2d.h, layers/size3d.h).
inline Size2d window_of(const std::vector<int64_t>& v, Size2d) {
  return v.size() == 1 ? Size2d(v[0]) : Size2d(v[0], v[1]);
}
inline Size3d window_of(const std::vector<int64_t>& v, Size3d) {
  return v.size() == 1 ? Size3d(v[0]) : Size3d(v[0], v[1], v[2]);
}
inline std::vector<int64_t> window_values(Size2d s) { return {s.h, s.w}; }
inline std::vector<int64_t> window_values(Size3d s) { return {s.d, s.h, s.w}; }
inline nlohmann::json window_json(Size2d s) { return size_json(s); }
inline nlohmann::json window_json(Size3d s) { return size3d_json(s); }
inline std::string window_str(Size2d s) { return size_str(s); }
inline std::string window_str(Size3d s) { return size3d_str(s); }

// An integer or a list of one per dimension (`count`, named `count_word`), each in `range`.
template <typename T, typename S>
Field<T> window(const std::string& name, S T::*member, Default<S> fallback, IntRange range, std::string doc,
                size_t count, const char* count_word) {
  Field<T> f = custom_field<T>(name, "ints", fallback.value ? window_json(*fallback.value) : nullptr, range.text(),
                               std::move(doc));
  f.read = [member, fallback, range, count, count_word](JsonArgs& a, const std::string& key, T& out) {
    if (fallback.value && !a.has(key)) {
      out.*member = *fallback.value;
      return;
    }
    const std::vector<int64_t> v = a.get_ints(key);
    MINIDL_CHECK(v.size() == 1 || v.size() == count, a.key_path(key), ": expected an integer or a list of ", count_word,
                 ", got ", v.size(), " values");
    const S s = window_of(v, S());
    for (int64_t x : window_values(s))
      if (!range.contains(x)) fail_range(a, key, "integers", range.text(), window_str(s));
    out.*member = s;
  };
  f.write = [member](const T& in) { return window_json(in.*member); };
  return f;
}

}  // namespace layer_fields_detail

// An integer or a list of two, each in `range`: "kernel_size": 3 or [3, 1].
template <typename T>
Field<T> size2d(const std::string& name, Size2d T::*member, Default<Size2d> fallback, IntRange range, std::string doc) {
  return layer_fields_detail::window(name, member, fallback, range, std::move(doc), 2, "two");
}

// An integer or a list of three, each in `range`: "kernel_size": 3 or [3, 1, 1] (d, h, w).
template <typename T>
Field<T> size3d(const std::string& name, Size3d T::*member, Default<Size3d> fallback, IntRange range, std::string doc) {
  return layer_fields_detail::window(name, member, fallback, range, std::move(doc), 3, "three");
}

// A list of layer specs (non-empty when `non_empty`), built where it is read; written back as
// each module's to_json.
template <typename T>
Field<T> layer_list(const std::string& name, Modules T::*member, bool non_empty, std::string doc) {
  Field<T> f = custom_field<T>(name, "layers", nullptr, "", std::move(doc));
  f.read = [member, non_empty](JsonArgs& a, const std::string& key, T& out) {
    const nlohmann::json& list = a.get_json(key);
    const std::string path = a.key_path(key);
    MINIDL_CHECK(list.is_array() && (!non_empty || !list.empty()), path, ": expected a ", non_empty ? "non-empty " : "",
                 "list of layers, got ", list.is_array() ? "[]" : list.type_name());
    out.*member = build_layers(list, path);
  };
  f.write = [member](const T& in) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& m : in.*member) list.push_back(m->to_json());
    return list;
  };
  return f;
}

}  // namespace minidl
