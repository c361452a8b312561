#include "train/checkpoint.h"

#include "core/error.h"
#include "core/safetensors.h"

namespace minidl {

namespace {

constexpr const char* kFormat = "minidl-checkpoint-1";
constexpr const char* kOptimizerPrefix = "optimizer.";

CheckpointInfo info_from_metadata(const std::map<std::string, std::string>& meta, const std::string& path) {
  auto get = [&](const std::string& key) -> const std::string& {
    auto it = meta.find(key);
    MINIDL_CHECK(it != meta.end(), "checkpoint '", path, "': metadata has no '", key, "' (not a minidl checkpoint?)");
    return it->second;
  };
  MINIDL_CHECK(get("format") == kFormat, "checkpoint '", path, "': format '", get("format"), "', expected ", kFormat);
  CheckpointInfo info;
  try {
    info.epoch = std::stoll(get("epoch"));
    info.step = std::stoll(get("step"));
    info.config = nlohmann::json::parse(get("config"));
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail(str("checkpoint '", path, "': unreadable metadata (", e.what(), ")"));
  }
  return info;
}

}  // namespace

void save_checkpoint(const std::string& path, const Module& model, const Optimizer& optimizer,
                     const CheckpointInfo& info) {
  std::vector<std::pair<std::string, Tensor>> tensors = model.state_dict();
  for (auto& [name, t] : optimizer.state_tensors()) tensors.push_back({kOptimizerPrefix + name, t});
  std::map<std::string, std::string> meta{{"format", kFormat},
                                          {"epoch", std::to_string(info.epoch)},
                                          {"step", std::to_string(info.step)},
                                          {"config", info.config.dump()},
                                          {"optimizer", optimizer.state_scalars().dump()}};
  save_safetensors(path, tensors, meta);
}

CheckpointInfo read_checkpoint_info(const std::string& path) {
  return info_from_metadata(load_safetensors(path).metadata, path);
}

CheckpointInfo load_checkpoint(const std::string& path, Module& model, Optimizer& optimizer) {
  SafeTensors st = load_safetensors(path);
  CheckpointInfo info = info_from_metadata(st.metadata, path);
  std::vector<std::pair<std::string, Tensor>> weights, opt;
  const std::string prefix = kOptimizerPrefix;
  for (auto& [name, t] : st.tensors) {
    if (name.compare(0, prefix.size(), prefix) == 0) opt.push_back({name.substr(prefix.size()), t});
    else weights.push_back({name, t});
  }
  nlohmann::json scalars;
  try {
    scalars = nlohmann::json::parse(st.metadata.at("optimizer"));
  } catch (const std::exception&) {
    fail(str("checkpoint '", path, "': missing or unreadable optimizer metadata"));
  }
  try {
    model.load_state_dict(weights);
    optimizer.load_state(opt, scalars);
  } catch (const Error& e) {
    fail(str("checkpoint '", path, "': ", e.what()));
  }
  return info;
}

}  // namespace minidl
