// Kinds of spec rows only layers have (core/field_kinds.h has the rest): a (height, width) pair
// and a list of layer specs, built into the container's children.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/field_kinds.h"
#include "layers/module.h"
#include "layers/registry.h"
#include "layers/size2d.h"

namespace minidl {

using Modules = std::vector<std::shared_ptr<Module>>;

// An integer or a list of two, each in `range`: "kernel_size": 3 or [3, 1].
template <typename T>
Field<T> size2d(const std::string& name, Size2d T::*member, Default<Size2d> fallback, IntRange range, std::string doc) {
  Field<T> f = custom_field<T>(name, "ints", fallback.value ? size_json(*fallback.value) : nullptr, range.text(),
                               std::move(doc));
  f.read = [member, fallback, range](JsonArgs& a, const std::string& key, T& out) {
    if (fallback.value && !a.has(key)) {
      out.*member = *fallback.value;
      return;
    }
    const std::vector<int64_t> v = a.get_ints(key);
    MINIDL_CHECK(v.size() <= 2, a.key_path(key), ": expected an integer or a list of two, got ", v.size(), " values");
    const Size2d s = v.size() == 1 ? Size2d(v[0]) : Size2d(v[0], v[1]);
    if (!range.contains(s.h) || !range.contains(s.w)) fail_range(a, key, "integers", range.text(), size_str(s));
    out.*member = s;
  };
  f.write = [member](const T& in) { return size_json(in.*member); };
  return f;
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
