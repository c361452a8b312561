#include "optim/named_params.h"

#include <map>
#include <string>

#include "core/error.h"

namespace minidl {

std::vector<NamedParam> named_parameters(Module& model) {
  std::map<std::string, std::string> type_at;
  for (const auto& [path, m] : model.named_modules()) type_at[path] = m->type_name();
  std::vector<NamedParam> out;
  for (const auto& [name, t] : model.named_parameters()) {
    const size_t dot = name.rfind('.');
    const std::string owner = dot == std::string::npos ? "" : name.substr(0, dot);
    MINIDL_ASSERT(type_at.count(owner));
    out.push_back({name, t, type_at[owner]});
  }
  return out;
}

}  // namespace minidl
