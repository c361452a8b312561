// Parameter groups: settings that differ from the optimizer's own for some parameters, as in
// PyTorch's param_groups, but chosen by rule from the config instead of by hand:
//   "groups": [{"module_type": "BatchNorm2d", "match": "bias", "lr_scale": 64, "weight_decay": 0},
//              {"match": "*.body.*", "lr_scale": 0.5}]
// A parameter takes the FIRST group that matches it, else the optimizer's own settings.
// A group matches when all of its given selectors do:
//   "match": a pattern on the parameter name. Without wildcards it names a dotted suffix
//            ("bias" matches "bias", "0.bias" and "2.1.bias", not "0.unbias"); with '*' (any run of
//            characters, dots included) or '?' (one character) it must match the whole name.
//   "module_type": the type of the module that owns the parameter ("BatchNorm2d").
// Overrides: "lr_scale" (multiplies the lr, default 1), "weight_decay" (default: the optimizer's),
// "schedule": the group's own lr schedule (an object as the config's "schedule"), used instead of
// the run's: the group's lr is the optimizer's lr * lr_scale * its factor (PyTorch's LambdaLR with
// one lambda per group). E.g. a bias that trains only for the first 7 steps at a decaying lr:
//   {"match": "0.bias", "schedule": {"type": "piecewise_linear", "steps": [0, 7], "factors": [1, 0]}}
// A group needs a selector; a module type no layer has, and a group that matches no parameter,
// are errors (a typo would otherwise silently change nothing).
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/field_kinds.h"
#include "core/fields.h"
#include "core/json_args.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"

namespace minidl {

struct ParamGroup {
  std::string match;        // empty: any name
  std::string module_type;  // empty: any module
  double lr_scale = 1.0;
  std::optional<double> weight_decay;
  std::shared_ptr<const LrSchedule> schedule;  // null: the run's schedule

  bool matches(const NamedParam& p) const;
  // The keys of one group object; a group needs a selector.
  static const Fields<ParamGroup>& fields();
  nlohmann::json to_json() const { return write_fields(fields(), *this); }
};

// The "groups" key of an optimizer config: a list of ParamGroup objects.
template <typename T>
Field<T> param_groups_field(std::vector<ParamGroup> T::*member);

// '*' and '?' glob over the whole name; a pattern without them matches a dotted suffix.
bool param_name_matches(const std::string& pattern, const std::string& name);

// Reads the optional "module_type" selector of a group or rule: "" or a layer type of the layer
// table (layers/registry.h); anything else is an error naming the key and the known types.
std::string read_module_type(JsonArgs& args);
// The row of that key, written back only when set.
template <typename T>
Field<T> module_type_field(std::string T::*member, std::string doc);

// Reads the optional "groups" list of an optimizer config.
std::vector<ParamGroup> read_param_groups(JsonArgs& args);

// Index of the first group matching p, or -1 for the optimizer's own settings.
int find_param_group(const std::vector<ParamGroup>& groups, const NamedParam& p);

template <typename T>
Field<T> module_type_field(std::string T::*member, std::string doc) {
  Field<T> f = written_when_set(text("module_type", member, "", "a layer type (`minidl layers`)", std::move(doc)));
  f.read = [member](JsonArgs& a, const std::string&, T& out) { out.*member = read_module_type(a); };
  return f;
}

template <typename T>
Field<T> param_groups_field(std::vector<ParamGroup> T::*member) {
  return object_list("groups", member, ParamGroup::fields(),
                     "parameter groups, each selectors (match, module_type) and overrides (lr_scale, "
                     "weight_decay, schedule): a parameter takes the first group that matches it");
}

}  // namespace minidl
