// A closed set of types chosen by a config object's "type" ("SGD", "cosine", "cifar100"): each
// type is a descriptor in one table, and the object's "type" picks its entry, so no string
// if-chain decides and an unknown name is one error listing the table's names.
#pragma once
#include <string>
#include <vector>

#include "core/error.h"
#include "core/fields.h"
#include "core/json_args.h"
#include "core/json_limits.h"

namespace minidl {

// The names of `table`, quoted: "a", "b" or "c".
template <typename D>
std::string type_choices(const std::vector<const D*>& table) {
  std::string text;
  for (size_t i = 0; i < table.size(); ++i)
    text += (i == 0 ? "" : i + 1 == table.size() ? " or " : ", ") + ("\"" + table[i]->name + "\"");
  return text;
}

// The entry of `table` named by the "type" key of `args` (`fallback` when absent; required when
// `fallback` is empty); anything else is an error naming the key, `what` and the names:
//   schedule.type: unknown schedule "onecycle" (expected "constant", "step", ...)
template <typename D>
const D& read_type(const std::vector<const D*>& table, JsonArgs& args, const char* what,
                   const std::string& fallback = "") {
  const std::string name = fallback.empty() ? args.get_string("type") : args.get_string("type", fallback);
  for (const D* d : table)
    if (d->name == name) return *d;
  fail(str(args.key_path("type"), ": unknown ", what, " \"", text_excerpt(name), "\" (expected ", type_choices(table),
           ")"));
}

// The rows of a section whose "type" picks one table entry: the "type" row, then each type's rows
// marked with it.
template <typename D>
std::vector<FieldInfo> typed_rows(const std::vector<const D*>& table, const char* what) {
  FieldInfo type;
  type.name = "type";
  type.type = "string";
  type.required = true;
  type.range = type_choices(table);
  type.doc = str("the ", what);
  std::vector<FieldInfo> rows = {type};
  for (const D* d : table) {
    for (FieldInfo f : d->fields) {
      f.variant = d->name;
      rows.push_back(std::move(f));
    }
  }
  return rows;
}

}  // namespace minidl
