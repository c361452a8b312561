#include "optim/param_groups.h"

#include "core/error.h"
#include "core/json_limits.h"
#include "core/json_args.h"
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

ParamGroup ParamGroup::from_json(const nlohmann::json& j, const std::string& path) {
  MINIDL_CHECK(j.is_object(), path, ": expected a group object, got ", json_excerpt(j));
  JsonArgs args(j, path);
  ParamGroup g;
  g.match = args.get_string("match", "");
  g.module_type = read_module_type(args);
  g.lr_scale = args.get_float("lr_scale", 1.0);
  if (args.has("weight_decay")) g.weight_decay = args.get_float("weight_decay");
  if (args.has("schedule")) g.schedule = make_schedule(args.get_json("schedule"), args.key_path("schedule"));
  args.finish();
  MINIDL_CHECK(!g.match.empty() || !g.module_type.empty(), path,
               ": a group needs \"match\" (a parameter name pattern) and/or \"module_type\"");
  MINIDL_CHECK(g.lr_scale >= 0, args.key_path("lr_scale"), ": expected >= 0, got ", g.lr_scale);
  MINIDL_CHECK(!g.weight_decay || *g.weight_decay >= 0, args.key_path("weight_decay"),
               ": expected >= 0, got ", g.weight_decay.value_or(0));
  return g;
}

nlohmann::json ParamGroup::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  if (!match.empty()) j["match"] = match;
  if (!module_type.empty()) j["module_type"] = module_type;
  j["lr_scale"] = lr_scale;
  if (weight_decay) j["weight_decay"] = *weight_decay;
  if (schedule) j["schedule"] = schedule->to_json();
  return j;
}

std::vector<ParamGroup> read_param_groups(JsonArgs& args) {
  std::vector<ParamGroup> groups;
  if (!args.has("groups")) return groups;
  const nlohmann::json& list = args.get_json("groups");
  const std::string path = args.key_path("groups");
  MINIDL_CHECK(list.is_array(), path, ": expected a list of group objects, got ", json_excerpt(list));
  for (size_t i = 0; i < list.size(); ++i)
    groups.push_back(ParamGroup::from_json(list[i], str(path, "[", i, "]")));
  return groups;
}

int find_param_group(const std::vector<ParamGroup>& groups, const NamedParam& p) {
  for (size_t g = 0; g < groups.size(); ++g)
    if (groups[g].matches(p)) return static_cast<int>(g);
  return -1;
}

}  // namespace minidl
