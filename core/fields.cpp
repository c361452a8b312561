#include "core/fields.h"

namespace minidl {

std::string FieldInfo::section() const {
  const size_t dot = name.find('.');
  return dot == std::string::npos ? std::string() : name.substr(0, dot);
}

std::string FieldInfo::key() const { return name.substr(name.find('.') + 1); }

nlohmann::json fields_schema(const std::vector<FieldInfo>& fields) {
  nlohmann::json out = nlohmann::json::array();
  for (const FieldInfo& f : fields) {
    nlohmann::json key = {{"name", f.name}, {"type", f.type}, {"required", f.required}, {"doc", f.doc}};
    if (!f.required && !f.default_value.is_null()) key["default"] = f.default_value;
    if (!f.range.empty()) key["range"] = f.range;
    out.push_back(std::move(key));
  }
  return out;
}

}  // namespace minidl
