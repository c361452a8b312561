// The asynchronous checkpoint writer (train/checkpoint_writer.h): its file is byte for byte the
// synchronous save_checkpoint's for the state at write() (training changing the tensors right
// after does not reach it), the snapshot buffer grows for a larger state, the kept checkpoints
// rotate through it, and a failed background write surfaces naming the file, once.
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <set>

#include "core/device.h"
#include "layers/registry.h"
#include "optim/optimizer.h"
#include "train/checkpoint.h"
#include "train/checkpoint_writer.h"
#include "test_util.h"

using namespace minidl;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A model with parameters and buffers, and SGD with momentum after two steps: every kind of state
// a checkpoint holds, on `device`.
struct Trained {
  std::shared_ptr<Module> model;
  std::unique_ptr<Optimizer> optimizer;
};

Trained trained_state(Device device, int64_t channels, uint64_t seed) {
  Trained s;
  s.model = build_sequential(json::parse(str(R"([
      {"type": "Conv2d", "in_channels": 3, "out_channels": )", channels, R"(, "kernel_size": 3, "padding": 1, "bias": false},
      {"type": "BatchNorm2d", "num_features": )", channels, R"(},
      {"type": "Flatten"},
      {"type": "Linear", "in_features": )", channels * 4, R"(, "out_features": 10}])")),
                             "model");
  s.model->to(device);
  std::vector<NamedParam> params;
  for (auto& [name, t] : s.model->named_parameters()) {
    t.copy_(test::random_tensor(t.shape(), seed++));
    params.push_back({name, t, "Conv2d"});
  }
  s.optimizer = make_optimizer(json::parse(R"({"type": "SGD", "lr": 0.1, "momentum": 0.9, "nesterov": true})"),
                               params, "optimizer");
  for (int step = 0; step < 2; ++step) {
    for (NamedParam& p : params) p.tensor.set_grad(test::random_tensor(p.tensor.shape(), seed++, -1, 1, device));
    s.optimizer->step(0.1);
  }
  return s;
}

CheckpointInfo info_at(int64_t step) {
  CheckpointInfo info;
  info.epoch = 1;
  info.step = step;
  info.config = {{"seed", 3}, {"epochs", 2}};
  info.epoch_seen = 256;
  info.epoch_correct = 100;
  info.epoch_loss_sum = 3.25;
  info.epoch_seconds = 1.5;
  info.classes = {"cat", "dog"};
  return info;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Training goes on after write(): the weights change at once.
void change_weights(Module& model) {
  for (auto& [name, t] : model.named_parameters()) t.copy_(Tensor::full(t.shape(), 7.f).to(t.device()));
}

void same_file_as_save_checkpoint(Device device) {
  test::TempDir dir("checkpoint_writer_same");
  CheckpointWriter writer;
  // The second state is larger: the writer's buffer grows.
  for (const int64_t channels : {4, 16}) {
    INFO("channels " << channels);
    Trained s = trained_state(device, channels, 10 * static_cast<uint64_t>(channels));
    const CheckpointInfo info = info_at(12);
    save_checkpoint(dir.file("sync.safetensors"), *s.model, *s.optimizer, info);
    writer.write(dir.path.string(), *s.model, *s.optimizer, info, -1, 1);
    change_weights(*s.model);
    writer.wait();
    REQUIRE(slurp(dir.file("checkpoint.safetensors")) == slurp(dir.file("sync.safetensors")));
    // And it loads (the CRC checked) into the same model, bringing back the weights of write().
    Trained loaded = trained_state(device, channels, 999);
    REQUIRE(load_checkpoint(dir.file("checkpoint.safetensors"), *loaded.model, *loaded.optimizer).step == 12);
    save_checkpoint(dir.file("reloaded.safetensors"), *loaded.model, *loaded.optimizer, info);
    REQUIRE(slurp(dir.file("reloaded.safetensors")) == slurp(dir.file("sync.safetensors")));
  }
}

// The safetensors file at `path` with its header passed through `edit` (the data section kept);
// returns that data section.
std::string edit_header(const std::string& path, const std::function<void(nlohmann::ordered_json&)>& edit) {
  const std::string bytes = slurp(path);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t{static_cast<unsigned char>(bytes[static_cast<size_t>(i)])} << (8 * i);
  nlohmann::ordered_json header = nlohmann::ordered_json::parse(bytes.substr(8, n));
  edit(header);
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>(text.size() >> (8 * i));
  const std::string data = bytes.substr(8 + n);
  std::ofstream(path, std::ios::binary) << out << text << data;
  return data;
}

void swap_entries(nlohmann::ordered_json& header, const char* a, const char* b) {
  std::swap(header[a]["data_offsets"], header[b]["data_offsets"]);
}

std::set<std::string> files_in(const test::TempDir& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir.path)) names.insert(e.path().filename().string());
  return names;
}

}  // namespace

TEST_CASE("checkpoint writer: the file is save_checkpoint's byte for byte, for the state at write()",
          "[checkpoint]") {
  same_file_as_save_checkpoint(Device::cpu());
}

TEST_CASE("checkpoint writer: a CUDA state's snapshot (pinned, asynchronous copies) gives the same file",
          "[checkpoint][cuda]") {
  MINIDL_REQUIRE_CUDA();
  same_file_as_save_checkpoint(Device::cuda(0));
}

TEST_CASE("checkpoint writer: keep=3 leaves the newest checkpoint and the two before it", "[checkpoint]") {
  test::TempDir dir("checkpoint_writer_keep");
  Trained s = trained_state(Device::cpu(), 4, 1);
  CheckpointWriter writer;
  int64_t previous = -1;
  for (const int64_t step : {2, 4, 6, 8, 10}) {
    writer.write(dir.path.string(), *s.model, *s.optimizer, info_at(step), previous, 3);
    change_weights(*s.model);
    previous = step;
  }
  writer.wait();
  REQUIRE(files_in(dir) == std::set<std::string>{"checkpoint.safetensors", "checkpoint.step-6.safetensors",
                                                 "checkpoint.step-8.safetensors"});
  REQUIRE(read_checkpoint_info(dir.file("checkpoint.safetensors")).step == 10);
  REQUIRE(read_checkpoint_info(dir.file("checkpoint.step-8.safetensors")).step == 8);
  REQUIRE(read_checkpoint_info(dir.file("checkpoint.step-6.safetensors")).step == 6);
}

TEST_CASE("checkpoint writer: a failed background write is thrown once, naming the file", "[checkpoint]") {
  test::TempDir dir("checkpoint_writer_error");
  const std::string run = dir.file("run"), file = run + "/checkpoint.safetensors";
  fs::create_directories(run);
  Trained s = trained_state(Device::cpu(), 4, 1);
  CheckpointWriter writer;
  writer.write(run, *s.model, *s.optimizer, info_at(2), -1, 1);
  writer.wait();
  // The run folder replaced by a file: the write fails whoever runs it (permissions do not stop
  // root).
  fs::remove_all(run);
  std::ofstream(run) << "not a folder";
  writer.write(run, *s.model, *s.optimizer, info_at(4), 2, 1);
  REQUIRE_THAT(test::error_of([&] { writer.wait(); }),
               Catch::Contains("cannot write safetensors file '" + file + "'") && Catch::Contains("cannot create"));
  REQUIRE_NOTHROW(writer.wait());
  // Unwaited, the error comes out of the next write(), which writes nothing.
  writer.write(run, *s.model, *s.optimizer, info_at(6), 4, 1);
  REQUIRE_THAT(test::error_of([&] { writer.write(run, *s.model, *s.optimizer, info_at(8), 6, 1); }),
               Catch::Contains("cannot write safetensors file '" + file + "'"));
  // Once the folder is back, writing goes on.
  fs::remove(run);
  fs::create_directories(run);
  writer.write(run, *s.model, *s.optimizer, info_at(10), -1, 1);
  writer.wait();
  REQUIRE(read_checkpoint_info(file).step == 10);
}

TEST_CASE("checkpoint integrity: names swapped in the header are found and an older file loads only in minidl's order",
          "[checkpoint][hostile]") {
  test::TempDir dir("checkpoint_names");
  Trained s = trained_state(Device::cpu(), 4, 1);
  const std::string path = dir.file("checkpoint.safetensors");
  save_checkpoint(path, *s.model, *s.optimizer, info_at(12));
  const auto load = [&](const std::string& file) {
    Trained t = trained_state(Device::cpu(), 4, 99);
    load_checkpoint(file, *t.model, *t.optimizer);
    return t;
  };
  REQUIRE_NOTHROW(load(path));
  // BatchNorm's weight and bias have the same shape: swapped, each would load the other's values.
  const std::string swapped = dir.file("swapped.safetensors");
  fs::copy_file(path, swapped);
  edit_header(swapped, [](nlohmann::ordered_json& h) { swap_entries(h, "1.weight", "1.bias"); });
  REQUIRE_THAT(test::error_of([&] { load(swapped); }),
               Catch::StartsWith("checkpoint '" + swapped + "' is damaged: its tensors' CRC-32 is "));

  // A file written before the names were checksummed: the CRC-32 of the bytes alone.
  const auto as_older = [](nlohmann::ordered_json& h) {
    h["__metadata__"].erase("tensors_crc32");
    h["__metadata__"]["payload_crc32"] = "00000000";
  };
  const std::string older = dir.file("older.safetensors");
  fs::copy_file(path, older);
  const std::string data = edit_header(older, as_older);
  char crc[9];
  std::snprintf(crc, sizeof crc, "%08lx", crc32_z(0L, reinterpret_cast<const Bytef*>(data.data()), data.size()));
  edit_header(older, [&](nlohmann::ordered_json& h) { h["__metadata__"]["payload_crc32"] = crc; });
  const Trained loaded = load(older);
  REQUIRE(loaded.model->state_dict().at(1).second.to_vector() == s.model->state_dict().at(1).second.to_vector());
  const std::string older_swapped = dir.file("older_swapped.safetensors");
  fs::copy_file(older, older_swapped);
  edit_header(older_swapped, [](nlohmann::ordered_json& h) { swap_entries(h, "1.weight", "1.bias"); });
  REQUIRE_THAT(test::error_of([&] { load(older_swapped); }),
               Catch::Contains("was written before checkpoints checksummed their tensors' names, and its tensor "
                               "'1.bias' lies where minidl writes '1.weight'"));
}
