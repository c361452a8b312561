#include "train/checkpoint.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include <zlib.h>

#include "core/error.h"
#include "core/json_limits.h"
#include "core/safetensors.h"
#include "data/options.h"
#include "train/config.h"

namespace minidl {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "minidl-checkpoint-1";
constexpr const char* kOptimizerPrefix = "optimizer.";
// The CRC-32 of every tensor's header entry (name, dtype, shape, offsets) and bytes, written with
// them: a flipped bit anywhere in the weights or the optimizer state, or two names swapped in the
// header, makes the file "damaged" instead of silently changing the run.
constexpr const char* kTensorsCrc32 = "tensors_crc32";
// Files written before kTensorsCrc32 carry the CRC-32 of the bytes alone, which binds no name to
// its bytes: such a file loads only when its tensors lie in the order minidl writes them (the
// model's state dict, then the optimizer's state), which then binds each name to its place.
constexpr const char* kPayloadCrc32 = "payload_crc32";
constexpr const char* kMetadataCrc32 = "metadata_crc32";

bool is_crc_hex(const std::string& s) {
  return s.size() == 8 && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

// CRC-32 of every metadata entry but the two checksums, as "key=value\n" in key order: an edited
// or damaged position, config or class list is found as a damaged tensor is.
std::string metadata_crc32(const std::map<std::string, std::string>& metadata) {
  uLong crc = crc32_z(0L, Z_NULL, 0);
  for (const auto& [key, value] : metadata) {
    if (key == kTensorsCrc32 || key == kPayloadCrc32 || key == kMetadataCrc32) continue;
    const std::string entry = key + "=" + value + "\n";
    crc = crc32_z(crc, reinterpret_cast<const Bytef*>(entry.data()), entry.size());
  }
  return crc_hex(static_cast<uint32_t>(crc));
}

// A whole decimal integer in [lo, hi]: "1xyz", "", "+-3" and values past int64 are errors.
int64_t metadata_int(const std::string& text, const std::string& key, int64_t lo, int64_t hi, const std::string& path) {
  int64_t v = 0;
  const char* end = text.data() + text.size();
  const auto r = std::from_chars(text.data(), end, v);
  MINIDL_CHECK(r.ec == std::errc() && r.ptr == end && !text.empty(), "checkpoint '", path, "': metadata '", key,
               "' is '", text_excerpt(text), "', expected an integer");
  MINIDL_CHECK(v >= lo && v <= hi, "checkpoint '", path, "': metadata '", key, "' is ", v, ", expected ", lo, "..", hi);
  return v;
}

// A double written by save_checkpoint with 17 significant digits (exact round trip).
double metadata_double(const std::string& text, const std::string& key, const std::string& path) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  MINIDL_CHECK(!text.empty() && end == text.c_str() + text.size() && errno == 0 && std::isfinite(v) && v >= 0,
               "checkpoint '", path, "': metadata '", key, "' is '", text_excerpt(text),
               "', expected a finite non-negative number");
  return v;
}

std::string exact(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

CheckpointInfo info_from_metadata(const std::map<std::string, std::string>& meta, const std::string& path) {
  auto get = [&](const std::string& key) -> const std::string& {
    auto it = meta.find(key);
    MINIDL_CHECK(it != meta.end(), "checkpoint '", path, "': metadata has no '", key, "' (not a minidl checkpoint?)");
    return it->second;
  };
  MINIDL_CHECK(get("format") == kFormat, "checkpoint '", path, "': format '", text_excerpt(get("format")),
               "', expected ", kFormat);
  CheckpointInfo info;
  info.epoch = metadata_int(get("epoch"), "epoch", 0, kMaxEpochs, path);
  info.step = metadata_int(get("step"), "step", 0, INT64_MAX, path);
  info.config = parse_json_limited(get("config"), str("checkpoint '", path, "': metadata 'config'"));
  MINIDL_CHECK(info.config.is_object(), "checkpoint '", path, "': metadata 'config' is a JSON ",
               info.config.type_name(), ", expected an object");
  // Written by checkpoints taken inside an epoch (older checkpoints are all at epoch ends).
  if (meta.count("epoch_seen")) {
    info.epoch_seen = metadata_int(get("epoch_seen"), "epoch_seen", 0, INT64_MAX, path);
    // Correct predictions count images, a token set's tokens or a volume set's voxels.
    const int64_t per_sample =
        std::max<int64_t>(1, DataOptions::from_json(info.config.value("data", nlohmann::json::object()),
                                                    str("checkpoint '", path, "': metadata 'config' data"))
                                 .outputs_per_sample());
    MINIDL_CHECK(info.epoch_seen <= INT64_MAX / per_sample, "checkpoint '", path, "': metadata 'epoch_seen' is ",
                 info.epoch_seen, ", too large");
    info.epoch_correct = metadata_int(get("epoch_correct"), "epoch_correct", 0, info.epoch_seen * per_sample, path);
    info.epoch_loss_sum = metadata_double(get("epoch_loss_sum"), "epoch_loss_sum", path);
    info.epoch_seconds = metadata_double(get("epoch_seconds"), "epoch_seconds", path);
  }
  if (meta.count("evaluated")) {
    MINIDL_CHECK(info.epoch_seen > 0, "checkpoint '", path,
                 "': metadata 'evaluated' belongs to a position inside an epoch");
    info.evaluated = metadata_int(get("evaluated"), "evaluated", 0, 1, path) == 1;
  }
  if (meta.count("selection")) {
    info.selection = parse_json_limited(get("selection"), str("checkpoint '", path, "': metadata 'selection'"));
    MINIDL_CHECK(info.selection.is_object(), "checkpoint '", path, "': metadata 'selection' is a JSON ",
                 info.selection.type_name(), ", expected an object");
  }
  if (meta.count("world_size")) info.world_size = metadata_int(get("world_size"), "world_size", 1, 1 << 20, path);
  if (meta.count("data_crc32")) {
    info.data_crc32 = get("data_crc32");
    MINIDL_CHECK(is_crc_hex(info.data_crc32), "checkpoint '", path, "': metadata 'data_crc32' is '",
                 text_excerpt(info.data_crc32), "', expected 8 hex digits");
  }
  if (meta.count("grad_scaler")) {
    info.grad_scaler = parse_json_limited(get("grad_scaler"), str("checkpoint '", path, "': metadata 'grad_scaler'"));
    MINIDL_CHECK(info.grad_scaler.is_object(), "checkpoint '", path, "': metadata 'grad_scaler' is a JSON ",
                 info.grad_scaler.type_name(), ", expected an object");
  }
  return info;
}

}  // namespace

std::vector<std::pair<std::string, Tensor>> checkpoint_tensors(const Module& model, const Optimizer& optimizer) {
  std::vector<std::pair<std::string, Tensor>> tensors = model.state_dict();
  for (auto& [name, t] : optimizer.state_tensors()) tensors.push_back({kOptimizerPrefix + name, t});
  return tensors;
}

std::map<std::string, std::string> checkpoint_metadata(const Optimizer& optimizer, const CheckpointInfo& info) {
  std::map<std::string, std::string> meta{{"format", kFormat},
                                          {"epoch", std::to_string(info.epoch)},
                                          {"step", std::to_string(info.step)},
                                          {"config", info.config.dump()},
                                          {"optimizer", optimizer.state_scalars().dump()},
                                          {"epoch_seen", std::to_string(info.epoch_seen)},
                                          {"epoch_correct", std::to_string(info.epoch_correct)},
                                          {"epoch_loss_sum", exact(info.epoch_loss_sum)},
                                          {"epoch_seconds", exact(info.epoch_seconds)}};
  if (info.epoch_seen > 0) meta["evaluated"] = info.evaluated ? "1" : "0";
  if (!info.grad_scaler.is_null()) meta["grad_scaler"] = info.grad_scaler.dump();
  if (!info.classes.is_null()) meta["classes"] = info.classes.dump();
  if (!info.selection.is_null()) meta["selection"] = info.selection.dump();
  if (info.world_size > 1) meta["world_size"] = std::to_string(info.world_size);
  if (!info.data_crc32.empty()) meta["data_crc32"] = info.data_crc32;
  return meta;
}

void save_checkpoint_bytes(const std::string& path, const std::vector<TensorBytes>& tensors,
                           std::map<std::string, std::string> metadata) {
  metadata[kTensorsCrc32] = tensors_crc32(tensors);
  metadata[kMetadataCrc32] = metadata_crc32(metadata);
  save_safetensors_bytes(path, tensors, metadata);
}

void save_checkpoint(const std::string& path, const Module& model, const Optimizer& optimizer,
                     const CheckpointInfo& info) {
  std::vector<std::pair<std::string, Tensor>> tensors = checkpoint_tensors(model, optimizer);
  for (auto& entry : tensors) entry.second = entry.second.cpu();
  save_checkpoint_bytes(path, tensor_bytes(tensors), checkpoint_metadata(optimizer, info));
}

bool is_kept_checkpoint_name(const std::string& name) {
  static const std::string head = "checkpoint.step-", tail = ".safetensors";
  if (name.size() <= head.size() + tail.size() || name.compare(0, head.size(), head) != 0 ||
      name.compare(name.size() - tail.size(), tail.size(), tail) != 0)
    return false;
  const std::string digits = name.substr(head.size(), name.size() - head.size() - tail.size());
  return digits.size() <= 18 && digits.find_first_not_of("0123456789") == std::string::npos;
}

void write_run_checkpoint(const std::string& dir, const std::vector<TensorBytes>& tensors,
                          std::map<std::string, std::string> metadata, int64_t step, int64_t previous_step,
                          int64_t keep) {
  const fs::path latest = fs::path(dir) / "checkpoint.safetensors";
  std::error_code ec;
  if (keep > 1 && previous_step >= 0 && previous_step != step && fs::exists(latest, ec)) {
    // A second name for the current file: the rename of the new one over `latest` leaves it intact.
    const fs::path kept = fs::path(dir) / str("checkpoint.step-", previous_step, ".safetensors");
    fs::remove(kept, ec);
    fs::create_hard_link(latest, kept, ec);
    MINIDL_CHECK(!ec, "cannot keep the checkpoint at step ", previous_step, " as '", kept.string(),
                 "': ", ec.message());
  }
  save_checkpoint_bytes(latest.string(), tensors, std::move(metadata));
  std::vector<std::pair<int64_t, fs::path>> kept;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (is_kept_checkpoint_name(name)) kept.push_back({std::stoll(name.substr(16)), e.path()});
  }
  MINIDL_CHECK(!ec, "cannot list the run folder '", dir, "': ", ec.message());
  std::sort(kept.rbegin(), kept.rend());
  for (size_t i = static_cast<size_t>(keep - 1); i < kept.size(); ++i) {
    fs::remove(kept[i].second, ec);
    MINIDL_CHECK(!ec, "cannot remove the old checkpoint '", kept[i].second.string(), "': ", ec.message());
  }
}

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Normalization statistics no run can produce (a NaN, infinite or negative running variance, a
// non-finite running mean) mean a corrupt or edited file; loaded, they would silently ruin every
// evaluation from then on.
void check_running_stats(const std::string& name, const Tensor& t, const std::string& path,
                         const char* what = "checkpoint") {
  const bool var = ends_with(name, "running_var");
  if ((!var && !ends_with(name, "running_mean")) || t.dtype() != DType::Float32) return;
  const float* v = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i)
    MINIDL_CHECK(std::isfinite(v[i]) && (!var || v[i] >= 0), what, " '", path, "': ", text_excerpt(name), "[", i,
                 "] is ", v[i], ", which no run produces (", var ? "a variance is finite and >= 0" : "a mean is finite",
                 "): the file is corrupt");
}

// The CRC-32 of the tensors' bytes alone, as files written before kTensorsCrc32 record it.
std::string payload_crc32(const std::vector<TensorBytes>& tensors) {
  uLong crc = crc32_z(0L, Z_NULL, 0);
  for (const TensorBytes& t : tensors) crc = crc32_z(crc, static_cast<const Bytef*>(t.data), t.nbytes);
  return crc_hex(static_cast<uint32_t>(crc));
}

void check_crc(const std::string& recorded, const std::string& actual, const std::string& what,
               const std::string& path) {
  MINIDL_CHECK(actual == recorded, what, " '", path, "' is damaged: its tensors' CRC-32 is ", actual,
               " but the file records ", text_excerpt(recorded),
               " (changed after it was written: a disk or copy error, or an edit)");
}

// The tensors as written: statistics a run can produce, and the CRC-32 the writer recorded.
void check_tensors(const SafeTensors& st, const std::string& path) {
  const std::string prefix = kOptimizerPrefix;
  for (const auto& [name, t] : st.tensors)
    if (name.compare(0, prefix.size(), prefix) != 0) check_running_stats(name, t, path);
  if (auto m = st.metadata.find(kMetadataCrc32); m != st.metadata.end()) {
    const std::string actual = metadata_crc32(st.metadata);
    MINIDL_CHECK(actual == m->second, "checkpoint '", path, "' is damaged: its metadata's CRC-32 is ", actual,
                 " but the file records ", text_excerpt(m->second),
                 " (changed after it was written: a disk or copy error, or an edit)");
  }
  if (auto it = st.metadata.find(kTensorsCrc32); it != st.metadata.end())
    check_crc(it->second, tensors_crc32(st.tensors), "checkpoint", path);
  else if (auto old = st.metadata.find(kPayloadCrc32); old != st.metadata.end())
    check_crc(old->second, payload_crc32(tensor_bytes(st.tensors)), "checkpoint", path);
}

// A file whose CRC binds no name to its bytes (kPayloadCrc32 only) must hold the tensors in the
// order `expected` (checkpoint_tensors') lists them.
void check_legacy_order(const SafeTensors& st, const std::vector<std::pair<std::string, Tensor>>& expected,
                        const std::string& path) {
  if (st.metadata.count(kTensorsCrc32) || !st.metadata.count(kPayloadCrc32)) return;
  const size_t n = std::min(st.tensors.size(), expected.size());
  for (size_t i = 0; i < n; ++i)
    MINIDL_CHECK(st.tensors[i].first == expected[i].first, "checkpoint '", path, "' was written before checkpoints ",
                 "checksummed their tensors' names, and its tensor '", text_excerpt(st.tensors[i].first),
                 "' lies where minidl writes '", expected[i].first, "': its header may have been edited (names ",
                 "swapped), so it is refused");
}

}  // namespace

std::string crc_hex(uint32_t crc) {
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08lx", static_cast<unsigned long>(crc));
  return hex;
}

std::string tensors_crc32(const std::vector<std::pair<std::string, Tensor>>& host_tensors) {
  return tensors_crc32(tensor_bytes(host_tensors));
}

std::string tensors_crc32(const std::vector<TensorBytes>& tensors) {
  uLong crc = crc32_z(0L, Z_NULL, 0);
  uint64_t offset = 0;
  for (const TensorBytes& t : tensors) {
    std::string entry = t.name + '\0' + dtype_name(t.dtype) + '\0';
    for (const int64_t d : t.shape) entry += std::to_string(d) + ',';
    entry += str('\0', offset, ',', offset + t.nbytes, '\n');
    offset += t.nbytes;
    crc = crc32_z(crc, reinterpret_cast<const Bytef*>(entry.data()), entry.size());
    crc = crc32_z(crc, static_cast<const Bytef*>(t.data), t.nbytes);
  }
  return crc_hex(static_cast<uint32_t>(crc));
}

std::map<std::string, std::string> weights_metadata(const std::vector<TensorBytes>& tensors) {
  return {{"format", "pt"}, {kTensorsCrc32, tensors_crc32(tensors)}};
}

void save_weights(const std::string& path, const Module& model, const std::map<std::string, std::string>& extra) {
  std::vector<std::pair<std::string, Tensor>> host = model.state_dict();
  for (auto& entry : host) entry.second = entry.second.cpu();
  const std::vector<TensorBytes> bytes = tensor_bytes(host);
  std::map<std::string, std::string> metadata = weights_metadata(bytes);
  metadata.insert(extra.begin(), extra.end());
  save_safetensors_bytes(path, bytes, metadata);
}

void check_weights(const SafeTensors& st, const std::string& path) {
  for (const auto& [name, t] : st.tensors) check_running_stats(name, t, path, "weights file");
  if (auto it = st.metadata.find(kTensorsCrc32); it != st.metadata.end())
    check_crc(it->second, tensors_crc32(st.tensors), "weights file", path);
}

namespace {

// The parts of a run's config that define its model and what the model is given.
nlohmann::json model_parts(const nlohmann::json& config) {
  nlohmann::json parts = {{"model", config.value("model", nlohmann::json())}};
  const nlohmann::json data = config.value("data", nlohmann::json::object());
  for (const char* key : {"format", "image_size", "normalize"})
    parts[key] = data.is_object() ? data.value(key, nlohmann::json()) : nlohmann::json();
  return parts;
}

}  // namespace

void check_run_config(const nlohmann::json& config, const std::string& config_path,
                      const std::string& checkpoint_path) {
  const CheckpointInfo info = read_checkpoint_info(checkpoint_path);
  MINIDL_CHECK(model_parts(config) == model_parts(info.config), "'", config_path,
               "' does not describe the model the run trained: its model, data.format, data.image_size or ",
               "data.normalize differ from those its checkpoint '", checkpoint_path,
               "' records (config.json was edited after the run wrote it); restore the run's config.json");
}

CheckpointInfo read_checkpoint_info(const std::string& path) {
  const SafeTensors st = load_safetensors(path);
  check_tensors(st, path);
  return info_from_metadata(st.metadata, path);
}

CheckpointInfo load_checkpoint(const std::string& path, Module& model, Optimizer& optimizer) {
  SafeTensors st = load_safetensors(path);
  check_tensors(st, path);
  check_legacy_order(st, checkpoint_tensors(model, optimizer), path);
  CheckpointInfo info = info_from_metadata(st.metadata, path);
  std::vector<std::pair<std::string, Tensor>> weights, opt;
  const std::string prefix = kOptimizerPrefix;
  for (auto& [name, t] : st.tensors) {
    if (name.compare(0, prefix.size(), prefix) == 0)
      opt.push_back({name.substr(prefix.size()), t});
    else
      weights.push_back({name, t});
  }
  auto it = st.metadata.find("optimizer");
  MINIDL_CHECK(it != st.metadata.end(), "checkpoint '", path, "': metadata has no 'optimizer'");
  const nlohmann::json scalars = parse_json_limited(it->second, str("checkpoint '", path, "': metadata 'optimizer'"));
  try {
    model.load_state_dict(weights);
    optimizer.load_state(opt, scalars);
  } catch (const Error& e) {
    fail(str("checkpoint '", path, "': ", e.what()));
  }
  return info;
}

}  // namespace minidl
