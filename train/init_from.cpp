#include "train/init_from.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "core/error.h"
#include "core/json_limits.h"
#include "core/safetensors.h"
#include "layers/module.h"
#include "optim/param_groups.h"

namespace minidl {

namespace fs = std::filesystem;

namespace {

constexpr const char* kCounterSuffix = "num_batches_tracked";

// "a, b, c and 4 more": names in messages and the log, at most `most` of them.
std::string name_list(const std::vector<std::string>& names, size_t most = 6) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < most; ++i) out += (i ? ", " : "") + text_excerpt(names[i], 80);
  if (names.size() > most) out += str(" and ", names.size() - most, " more");
  return out;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The name a file tensor takes in the model: the longest "map" key that is the name or a dotted
// prefix of it, replaced by its value ("" drops the prefix and its dot).
std::string mapped_name(const std::string& name, const std::vector<std::pair<std::string, std::string>>& map) {
  const std::pair<std::string, std::string>* best = nullptr;
  for (const auto& m : map) {
    const bool whole = name == m.first;
    const bool prefix =
        name.size() > m.first.size() && name.compare(0, m.first.size(), m.first) == 0 && name[m.first.size()] == '.';
    if ((whole || prefix) && (!best || m.first.size() > best->first.size())) best = &m;
  }
  if (!best) return name;
  const std::string rest = name.substr(best->first.size());  // "" or ".weight"
  if (best->second.empty()) return rest.empty() ? rest : rest.substr(1);
  return best->second + rest;
}

bool skipped(const std::string& name, const std::vector<std::string>& skip) {
  return std::any_of(skip.begin(), skip.end(), [&](const std::string& p) { return param_name_matches(p, name); });
}

}  // namespace

std::string init_from_file(const std::string& path, const std::string& key) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  MINIDL_CHECK(fs::exists(st), key, ".path: '", text_excerpt(path), "' does not exist (expected a run folder or a ",
               ".safetensors file)");
  if (!fs::is_directory(st)) return path;
  const std::string weights = (fs::path(path) / "model.safetensors").string();
  MINIDL_CHECK(fs::exists(weights), key, ".path: the folder '", text_excerpt(path), "' has no model.safetensors ",
               "(not a run folder, or its run has not finished an epoch)");
  return weights;
}

InitFromReport load_init_from(Module& model, const InitFromOptions& options, const std::string& key) {
  InitFromReport report;
  report.file = init_from_file(options.path, key);
  SafeTensors file;
  try {
    file = load_safetensors(report.file, /*other_dtypes=*/true);
  } catch (const Error& e) {
    fail(str(key, ".path: ", e.what()));
  }
  const std::string from = str(key, " '", text_excerpt(report.file), "'");

  // The file's tensors under their model names; a tensor of another dtype is kept by name only.
  std::map<std::string, const Tensor*> by_name;
  std::map<std::string, std::string> other_dtype, original;
  std::vector<std::string> file_names;
  auto add = [&](const std::string& name, const Tensor* t, const std::string& dtype) {
    const std::string to = mapped_name(name, options.map);
    MINIDL_CHECK(!to.empty() && !original.count(to), from, ": ", key, ".map gives two tensors (or an empty name) ",
                 "the name '", text_excerpt(to), "': '", text_excerpt(original.count(to) ? original[to] : name),
                 "' and '", text_excerpt(name), "'");
    original[to] = name;
    file_names.push_back(to);
    if (t)
      by_name[to] = t;
    else
      other_dtype[to] = dtype;
  };
  for (const auto& [name, t] : file.tensors) add(name, &t, "");
  for (const OtherDTypeTensor& t : file.other_dtypes) add(t.name, nullptr, t.dtype);

  std::set<std::string> taken;
  struct Copy {
    std::string name;
    Tensor dst;
    const Tensor* src;
  };
  std::vector<Copy> copies;
  for (auto& [name, dst] : model.state_dict()) {
    taken.insert(name);
    if (skipped(name, options.skip)) {
      report.skipped.push_back(name);
      continue;
    }
    const auto other = other_dtype.find(name);
    MINIDL_CHECK(other == other_dtype.end(), from, ": tensor '", text_excerpt(original[name]), "' is ", other->second,
                 ", which minidl does not read; the model's '", name, "' is ", dtype_name(dst.dtype()));
    const auto it = by_name.find(name);
    if (it == by_name.end()) {
      report.fresh.push_back(name);
      continue;
    }
    const Tensor& src = *it->second;
    const std::string where = original[name] == name
                                  ? str("'", name, "'")
                                  : str("'", text_excerpt(original[name]), "' (the model's '", name, "')");
    MINIDL_CHECK(src.shape() == dst.shape(), from, ": tensor ", where, " is ", shape_str(src.shape()),
                 " in the file but ", shape_str(dst.shape()), " in the model; add '", name, "' to ", key,
                 ".skip to keep it as initialized (a new head), or fix the model");
    MINIDL_CHECK(src.dtype() == dst.dtype() || (is_floating(src.dtype()) && is_floating(dst.dtype())), from,
                 ": tensor ", where, " is ", dtype_name(src.dtype()), " in the file but ", dtype_name(dst.dtype()),
                 " in the model");
    copies.push_back({name, dst, &src});
  }
  for (const std::string& name : file_names) {
    if (taken.count(name)) continue;
    if (ends_with(name, kCounterSuffix) && other_dtype.count(name))
      ++report.counters;
    else
      report.unused.push_back(name);
  }
  const std::string model_names = name_list([&] {
    std::vector<std::string> n;
    for (const auto& kv : model.state_dict()) n.push_back(kv.first);
    return n;
  }());
  MINIDL_CHECK(!copies.empty(), from, ": none of its ", file_names.size(), " tensors (", name_list(file_names),
               ") is a tensor of this model (", model_names, "): a file of another model? ", key,
               ".map renames the file's tensors");
  if (options.strict) {
    MINIDL_CHECK(report.fresh.empty(), from, ": the file has no tensor for the model's ", name_list(report.fresh),
                 "; add them to ", key, ".skip to keep them as initialized, or set ", key, ".strict false");
    std::vector<std::string> unexpected;
    for (const std::string& n : report.unused)
      if (!skipped(n, options.skip)) unexpected.push_back(n);
    MINIDL_CHECK(unexpected.empty(), from, ": the model has no tensor for the file's ", name_list(unexpected),
                 " (the model's: ", model_names, "); ", key, ".map renames them, ", key,
                 ".skip leaves them out, or set ", key, ".strict false");
  }
  for (Copy& c : copies) {
    c.dst.copy_(c.src->dtype() == c.dst.dtype() ? *c.src : c.src->to(c.dst.dtype()));
    report.loaded.push_back(c.name);
    report.loaded_values += c.dst.numel();
  }
  return report;
}

std::vector<std::string> init_from_lines(const InitFromReport& r, int64_t trainable, int64_t frozen) {
  std::vector<std::string> lines;
  lines.push_back(
      str("init_from ", r.file, ": loaded ", r.loaded.size(), " tensors (", r.loaded_values, " values)",
          r.skipped.empty() ? std::string() : str("; skipped ", r.skipped.size(), " (", name_list(r.skipped), ")"),
          r.fresh.empty() ? std::string() : str("; new ", r.fresh.size(), " (", name_list(r.fresh), ")"),
          r.skipped.empty() && r.fresh.empty() ? std::string() : ", initialized from the seed"));
  if (!r.unused.empty() || r.counters > 0)
    lines.push_back(str("init_from: not used from the file: ",
                        r.unused.empty() ? std::string() : str(r.unused.size(), " tensors (", name_list(r.unused), ")"),
                        !r.unused.empty() && r.counters > 0 ? ", " : "",
                        r.counters > 0 ? str(r.counters, " num_batches_tracked counters (PyTorch's; minidl keeps none)")
                                       : std::string()));
  lines.push_back(str("parameters: ", trainable, " trainable, ", frozen, " frozen at the first step"));
  return lines;
}

}  // namespace minidl
