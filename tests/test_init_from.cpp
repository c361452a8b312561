// init_from (train/init_from.h): loading by name over a built model, skip, map, strict, PyTorch's
// counters and half tensors, and the errors that name the tensor; "did you mean" (core/spelling.h).
#include <algorithm>
#include <filesystem>
#include <fstream>

#include "core/safetensors.h"
#include "core/spelling.h"
#include "layers/registry.h"
#include "test_util.h"
#include "train/init_from.h"

namespace fs = std::filesystem;
using namespace minidl;
using minidl::test::error_of;
using minidl::test::random_tensor;

namespace {

std::shared_ptr<Module> small_model(int64_t classes) {
  const nlohmann::json layers = nlohmann::json::parse(R"([
    {"type": "Conv2d", "in_channels": 3, "out_channels": 4, "kernel_size": 3, "bias": false},
    {"type": "BatchNorm2d", "num_features": 4},
    {"type": "GlobalAvgPool2d"},
    {"type": "Linear", "in_features": 4, "out_features": )" +
                                                      std::to_string(classes) + "}]");
  std::shared_ptr<Module> m = build_sequential(layers, "model.layers");
  m->assign_paths();
  return m;
}

std::string temp_file(const std::string& name) {
  return (fs::temp_directory_path() / ("minidl_init_from_" + name)).string();
}

Tensor tensor_of(Module& m, const std::string& name) {
  for (auto& [n, t] : m.state_dict())
    if (n == name) return t;
  FAIL("no tensor " << name);
  return Tensor();
}

bool same_values(const Tensor& a, const Tensor& b) { return a.to_vector() == b.to_vector(); }

// A file as PyTorch's safetensors writes it: the given F32 tensors plus an I64 counter.
void write_with_counter(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                        const std::string& counter) {
  nlohmann::ordered_json header;
  header["__metadata__"] = {{"format", "pt"}};
  std::string data;
  for (const auto& [name, t] : tensors) {
    const std::vector<float> v = t.to_vector();
    header[name] = {
        {"dtype", "F32"}, {"shape", t.shape()}, {"data_offsets", {data.size(), data.size() + 4 * v.size()}}};
    data.append(reinterpret_cast<const char*>(v.data()), 4 * v.size());
  }
  const int64_t count = 7;
  header[counter] = {
      {"dtype", "I64"}, {"shape", nlohmann::json::array()}, {"data_offsets", {data.size(), data.size() + 8}}};
  data.append(reinterpret_cast<const char*>(&count), 8);
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t n = text.size();
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << text << data;
}

}  // namespace

TEST_CASE("init_from loads by name, keeps skipped tensors and reports new ones", "[init_from]") {
  std::shared_ptr<Module> source = small_model(10);
  for (auto& [name, t] : source->state_dict()) t.copy_(random_tensor(t.shape(), std::hash<std::string>{}(name)));
  const std::string file = temp_file("ten.safetensors");
  save_safetensors(file, source->state_dict());

  std::shared_ptr<Module> target = small_model(3);
  const Tensor head_before = tensor_of(*target, "3.weight").to(Device::cpu()).to(DType::Float32);
  InitFromOptions o;
  o.path = file;
  o.skip = {"3.*"};
  const InitFromReport r = load_init_from(*target, o);
  std::vector<std::string> loaded = r.loaded;
  std::sort(loaded.begin(), loaded.end());
  CHECK(loaded == std::vector<std::string>{"0.weight", "1.bias", "1.running_mean", "1.running_var", "1.weight"});
  CHECK(r.loaded_values == 4 * 3 * 9 + 4 * 4);
  CHECK(r.skipped == std::vector<std::string>{"3.weight", "3.bias"});
  CHECK(r.fresh.empty());
  CHECK(r.unused.empty());
  for (const char* name : {"0.weight", "1.bias", "1.running_var"})
    CHECK(same_values(tensor_of(*target, name), tensor_of(*source, name)));
  CHECK(same_values(tensor_of(*target, "3.weight"), head_before));

  // Without skip the head's shape is refused, naming it and the fix.
  o.skip.clear();
  CHECK_THAT(error_of([&] { load_init_from(*small_model(3), o); }),
             Catch::Contains("tensor '3.weight' is (10, 4) in the file but (3, 4) in the model; add '3.weight' to "
                             "init_from.skip"));
  // strict false does not let a shape through either.
  o.strict = false;
  CHECK_THAT(error_of([&] { load_init_from(*small_model(3), o); }), Catch::Contains("'3.weight' is (10, 4)"));

  // A model tensor the file lacks: an error under strict, new (as initialized) without.
  std::vector<std::pair<std::string, Tensor>> partial = source->state_dict();
  partial.erase(partial.begin() + 1);  // 1.weight
  save_safetensors(file, partial);
  o.strict = true;
  CHECK_THAT(error_of([&] { load_init_from(*small_model(10), o); }),
             Catch::Contains("the file has no tensor for the model's 1.weight; add them to init_from.skip"));
  o.strict = false;
  CHECK(load_init_from(*small_model(10), o).fresh == std::vector<std::string>{"1.weight"});
  fs::remove(file);
}

TEST_CASE("init_from reads PyTorch's layout: map, I64 counters, half tensors", "[init_from]") {
  std::shared_ptr<Module> source = small_model(3);
  for (auto& [name, t] : source->state_dict()) t.copy_(random_tensor(t.shape(), name.size()));
  std::vector<std::pair<std::string, Tensor>> ddp;
  for (auto& [name, t] : source->state_dict()) ddp.emplace_back("module." + name, t);
  const std::string file = temp_file("ddp.safetensors");
  write_with_counter(file, ddp, "module.1.num_batches_tracked");

  InitFromOptions o;
  o.path = file;
  // Under strict, the names that do not match are refused, with the model's names to compare.
  CHECK_THAT(error_of([&] { load_init_from(*small_model(3), o); }),
             Catch::Contains("none of its 8 tensors (module.0.weight, ") && Catch::Contains("init_from.map renames"));
  o.map = {{"module", ""}};
  std::shared_ptr<Module> target = small_model(3);
  const InitFromReport r = load_init_from(*target, o);
  CHECK(r.loaded.size() == 7);
  CHECK(r.counters == 1);
  CHECK(r.unused.empty());
  CHECK(same_values(tensor_of(*target, "3.weight"), tensor_of(*source, "3.weight")));
  const std::vector<std::string> lines = init_from_lines(r, 100, 20);
  CHECK_THAT(lines.at(1), Catch::Contains("1 num_batches_tracked counters (PyTorch's; minidl keeps none)"));
  CHECK(lines.at(2) == "parameters: 100 trainable, 20 frozen at the first step");

  // A longer key wins, and "map" may rename to another prefix.
  o.map = {{"module", ""}, {"module.3", "3"}};
  CHECK(load_init_from(*small_model(3), o).loaded.size() == 7);
  // Two file tensors under one model name are refused.
  o.map = {{"module.0", "1"}, {"module", ""}};
  CHECK_THAT(error_of([&] { load_init_from(*small_model(3), o); }), Catch::Contains("init_from.map gives two tensors"));

  // bfloat16 weights load into the float32 model, converted as PyTorch's copy_ converts.
  std::vector<std::pair<std::string, Tensor>> half;
  for (auto& [name, t] : source->state_dict()) half.emplace_back(name, t.to(DType::BFloat16));
  save_safetensors(file, half);
  o.map.clear();
  std::shared_ptr<Module> from_half = small_model(3);
  load_init_from(*from_half, o);
  CHECK(same_values(tensor_of(*from_half, "0.weight"),
                    tensor_of(*source, "0.weight").to(DType::BFloat16).to(DType::Float32)));

  // A model tensor stored in a dtype minidl does not read is named.
  write_with_counter(file, {}, "0.weight");
  CHECK_THAT(error_of([&] { load_init_from(*small_model(3), o); }),
             Catch::Contains("tensor '0.weight' is I64, which minidl does not read"));
  fs::remove(file);
}

TEST_CASE("init_from's path: a run folder, a missing file, a corrupt one", "[init_from]") {
  const fs::path dir = fs::temp_directory_path() / "minidl_init_from_run";
  fs::create_directories(dir);
  CHECK_THAT(error_of([&] { init_from_file(dir.string()); }),
             Catch::Contains("has no model.safetensors (not a run folder, or its run has not finished an epoch)"));
  save_safetensors((dir / "model.safetensors").string(), small_model(3)->state_dict());
  CHECK(init_from_file(dir.string()) == (dir / "model.safetensors").string());
  CHECK_THAT(error_of([&] { init_from_file((dir / "nope").string()); }), Catch::Contains("does not exist"));
  std::ofstream((dir / "bad.safetensors").string()) << "not a safetensors file";
  InitFromOptions o;
  o.path = (dir / "bad.safetensors").string();
  CHECK_THAT(error_of([&] { load_init_from(*small_model(3), o); }),
             Catch::StartsWith("init_from.path: safetensors file"));
  fs::remove_all(dir);
}

TEST_CASE("did you mean: the nearest name within a few edits", "[spelling]") {
  const std::vector<std::string> commands = {"train", "predict", "eval", "summary", "profile", "export"};
  CHECK(closest_name("trian", commands) == "train");
  CHECK(closest_name("evl", commands) == "eval");
  CHECK(closest_name("PREDICT", commands) == "predict");
  CHECK(closest_name("frobnicate", commands).empty());
  CHECK(closest_name("", commands).empty());
  CHECK(edit_distance("abc", "acb") == 1);
  CHECK(edit_distance("kitten", "sitting") == 3);
  CHECK(did_you_mean("strde", {"stride", "padding"}) == " (did you mean 'stride'?)");
  CHECK(did_you_mean("zzz", {"stride"}).empty());
}
