#include "optim/param_groups.h"

#include "core/error.h"
#include "core/field_kinds.h"
#include "core/json_args.h"
#include "core/json_limits.h"
#include "core/type_table.h"
#include "layers/registry.h"

namespace minidl {

namespace {

// Iterative glob with backtracking to the last '*': linear in practice for names like ours.
bool glob(const std::string& pattern, const std::string& name) {
  size_t p = 0, n = 0, star = std::string::npos, resume = 0;
  while (n < name.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == name[n])) {
      ++p;
      ++n;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = n;
    } else if (star != std::string::npos) {
      p = star + 1;
      n = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

}  // namespace

bool param_name_matches(const std::string& pattern, const std::string& name) {
  if (pattern.find_first_of("*?") != std::string::npos) return glob(pattern, name);
  if (name == pattern) return true;
  return name.size() > pattern.size() &&
         name.compare(name.size() - pattern.size(), pattern.size(), pattern) == 0 &&
         name[name.size() - pattern.size() - 1] == '.';
}

bool ParamGroup::matches(const NamedParam& p) const {
  return (match.empty() || param_name_matches(match, p.name)) &&
         (module_type.empty() || module_type == p.module_type);
}

std::string read_module_type(JsonArgs& args) {
  const std::string type = args.get_string("module_type", "");
  if (!type.empty() && !find_layer(type)) {
    std::string known;
    for (const std::string& t : layer_types()) known += (known.empty() ? "" : ", ") + t;
    fail(str(args.key_path("module_type"), ": unknown layer type '", text_excerpt(type), "' (known: ", known, ")"));
  }
  return type;
}

namespace {

// "schedule": the group's own lr schedule, an object as the config's "schedule"; left out: the
// run's.
Field<ParamGroup> schedule_field() {
  using G = ParamGroup;
  Field<G> f = written_when_set(custom_field<G>(
      "schedule", "object", nullptr, "",
      "the group's own lr schedule (an object as the config's \"schedule\"), used instead of the run's: its lr is "
      "the optimizer's lr * lr_scale * this factor; left out: the run's"));
  f.required = false;
  f.children = typed_rows(schedule_types(), "schedule");
  f.read = [](JsonArgs& a, const std::string& key, G& g) {
    g.schedule = nullptr;
    if (a.has(key)) g.schedule = make_schedule(a.get_json(key), a.key_path(key));
  };
  f.write = [](const G& g) { return g.schedule ? std::optional<nlohmann::json>(g.schedule->to_json()) : std::nullopt; };
  return f;
}

}  // namespace

const Fields<ParamGroup>& ParamGroup::fields() {
  using G = ParamGroup;
  static const Fields<G> f{
      {written_when_set(text("match", &G::match, "", "a name pattern",
                             "the parameter names it takes: a dotted suffix (\"bias\"), or a glob with * and ? over "
                             "the whole name")),
       module_type_field(&G::module_type, "the type of the module owning the parameter"),
       number("lr_scale", &G::lr_scale, 1.0, kAtLeastZero, "multiplies the optimizer's lr for these parameters"),
       optional_number("weight_decay", &G::weight_decay, kAtLeastZero,
                       "the weight decay of these parameters; left out: the optimizer's"),
       schedule_field()},
      [](const G& g, const JsonArgs& args) {
        MINIDL_CHECK(!g.match.empty() || !g.module_type.empty(), args.path(),
                     ": a group needs \"match\" (a parameter name pattern) and/or \"module_type\"");
      }};
  return f;
}

std::vector<ParamGroup> read_param_groups(JsonArgs& args) {
  struct Holder {
    std::vector<ParamGroup> groups;
  } holder;
  param_groups_field(&Holder::groups).read(args, "groups", holder);
  return holder.groups;
}

int find_param_group(const std::vector<ParamGroup>& groups, const NamedParam& p) {
  for (size_t g = 0; g < groups.size(); ++g)
    if (groups[g].matches(p)) return static_cast<int>(g);
  return -1;
}

}  // namespace minidl
