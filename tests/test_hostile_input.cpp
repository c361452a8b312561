// Hostile and careless input to the readers: JSON nested or sized past the limits,
// integers that would wrap, library exceptions, binary bytes and huge values in messages,
// checkpoint metadata out of range, safetensors shapes whose sizes overflow, layers too large to
// allocate, and atomic files with the clean-up of what killed writers leave. Each case must
// throw one minidl::Error with a short, printable message naming what is wrong.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>

#include "core/atomic_file.h"
#include "core/device.h"
#include "core/error.h"
#include "core/json_args.h"
#include "core/json_limits.h"
#include "core/safetensors.h"
#include "core/tensor.h"
#include "data/options.h"
#include "layers/registry.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "test_util.h"
#include "train/checkpoint.h"
#include "train/class_metrics.h"
#include "train/config.h"
#include "train/run_folder.h"
#include "train/run_log.h"

using namespace minidl;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string temp_dir(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("minidl_test_hostile." + std::to_string(getpid())) / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

std::string write_file(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

std::string nested(const std::string& open, const std::string& close, int depth, const std::string& inner = "1") {
  std::string s;
  for (int i = 0; i < depth; ++i) s += open;
  s += inner;
  for (int i = 0; i < depth; ++i) s += close;
  return s;
}

using test::error_of;

// One line of printable ASCII, short enough to read.
void require_clean_message(const std::string& m, size_t max_len = 400) {
  INFO(m);
  REQUIRE(!m.empty());
  REQUIRE(m.size() <= max_len);
  for (const char c : m) REQUIRE((c >= 0x20 && c < 0x7f));
}

const char* kConfig = R"({"epochs": 2, "model": {"layers": [{"type": "ReLU"}]}, "optimizer": {"type": "SGD"}})";

}  // namespace

TEST_CASE("json limits: deep nesting is refused before anything recurses", "[hostile]") {
  const std::string deep = nested("[", "]", 100000);
  std::string m = error_of([&] { parse_json_limited(deep, "x"); });
  require_clean_message(m);
  REQUIRE_THAT(m, Catch::Contains("nested more than 64"));
  // 64 levels are fine; strings holding brackets do not count.
  REQUIRE_NOTHROW(parse_json_limited(nested("[", "]", 64), "x"));
  REQUIRE_NOTHROW(parse_json_limited("[\"" + std::string(100, '[') + "\"]", "x"));

  const std::string dir = temp_dir("deep");
  // 100k levels in data.mean and 1M in a layer: both read as config files.
  json c = json::parse(kConfig);
  std::string text = c.dump();
  text.insert(text.size() - 1, ", \"data\": {\"mean\": " + nested("[", "]", 100000) + "}");
  m = error_of([&] { read_json_file(write_file(dir + "/mean.json", text)); });
  REQUIRE_THAT(m, Catch::Contains("mean.json") && Catch::Contains("nested more than 64"));
  text = R"({"model": {"layers": [)" + nested("{\"a\":", "}", 1000000) + "]}}";
  m = error_of([&] { read_json_file(write_file(dir + "/layer.json", text)); });
  REQUIRE_THAT(m, Catch::Contains("nested more than 64"));

  // --set: a deep value, a deep key path, and a tree made deep by overrides.
  json cfg = json::parse(kConfig);
  m = error_of([&] { apply_override(cfg, "data.mean=" + nested("[", "]", 100000)); });
  REQUIRE_THAT(m, Catch::Contains("--set") && Catch::Contains("nested more than 64"));
  std::string path = "a";
  for (int i = 0; i < 200; ++i) path += ".a";
  m = error_of([&] { apply_override(cfg, path + "=1"); });
  require_clean_message(m, 200);
  REQUIRE_THAT(m, Catch::Contains("more than 64 parts"));
  // 62 levels each, but 66 once placed under data.y.z.w.v.u.
  json tree = json::parse(kConfig);
  apply_override(tree, "data.x=" + nested("[", "]", 60));
  apply_override(tree, "data.y.z.w.v.u=" + nested("[", "]", 60));
  m = error_of([&] { parse_train_config(tree); });
  REQUIRE_THAT(m, Catch::Contains("config: JSON nested more than 64"));
}

TEST_CASE("json limits: files are bounded, regular, and objects", "[hostile]") {
  const std::string dir = temp_dir("files");
  std::string m = error_of([] { read_json_file("/dev/zero"); });
  require_clean_message(m);
  REQUIRE_THAT(m, Catch::Contains("/dev/zero") && Catch::Contains("not a regular file"));
  m = error_of([&] { read_json_file(dir); });
  REQUIRE_THAT(m, Catch::Contains("is a directory"));
  m = error_of([&] { read_json_file(dir + "/missing.json"); });
  REQUIRE_THAT(m, Catch::Contains("cannot open config file") && Catch::Contains("missing.json"));
  const std::string big = dir + "/big.json";
  {
    std::ofstream f(big);
    f << "[" << std::string(kMaxJsonBytes, ' ') << "]";
  }
  m = error_of([&] { read_json_file(big); });
  REQUIRE_THAT(m, Catch::Contains("larger than the 16777216-byte limit"));
  m = error_of([&] { read_json_file(write_file(dir + "/list.json", "[1, 2]")); });
  REQUIRE_THAT(m, Catch::Contains("list.json") && Catch::Contains("expected a JSON object"));
  // nlohmann's number overflow: the file named, no "[json.exception" tag.
  m = error_of([&] { read_json_file(write_file(dir + "/lr.json", R"({"optimizer": {"lr": 1e999}})")); });
  require_clean_message(m);
  REQUIRE_THAT(m, Catch::Contains("lr.json") && Catch::Contains("number overflow"));
  REQUIRE_THAT(m, !Catch::Contains("json.exception"));
  // Binary garbage: quoted as \xNN, never raw.
  m = error_of([&] { read_json_file(write_file(dir + "/bin.json", std::string("\x01\xff\xfe{garbage", 11))); });
  require_clean_message(m);
}

TEST_CASE("json limits: excerpts are short and printable", "[hostile]") {
  REQUIRE(text_excerpt(std::string("a\x01\xff", 3)) == "a\\x01\\xff");
  const std::string e = json_excerpt(json(std::string(10000, 'x')));
  REQUIRE(e.size() <= 64);
  REQUIRE_THAT(e, Catch::EndsWith("..."));
  REQUIRE_NOTHROW(json_excerpt(json(std::string("\xff\xfe", 2))));  // invalid UTF-8 does not throw
  // A huge value in a wrong place is quoted, not dumped.
  json spec = {{"type", "Sequential"}, {"layers", json(std::string(100000, 'z'))}};
  const std::string m = error_of([&] { build_layer(spec, "model.layers[0]"); });
  require_clean_message(m);
}

TEST_CASE("config strings: a huge value or control bytes are echoed short and escaped", "[hostile]") {
  const std::string huge(5 << 20, 'x');
  const std::string esc = "red\x1b[31m";
  // The config with `key` ("precision", "eval.tta") set to `value`.
  auto with = [](const std::string& key, const std::string& value) {
    json c = json::parse(kConfig);
    c["schedule"] = {{"type", "warmup"}, {"warmup_epochs", 1}};
    const size_t dot = key.find('.');
    if (dot == std::string::npos) c[key] = value;
    else c[key.substr(0, dot)][key.substr(dot + 1)] = value;
    return c;
  };
  for (const std::string& bad : {huge, esc}) {
    std::vector<std::string> messages;
    for (const char* key : {"precision", "memory_format", "eval.tta", "schedule.decay"}) {
      messages.push_back(error_of([&] {
        const TrainConfig t = parse_train_config(with(key, bad));
        make_schedule(t.schedule, "schedule");
      }));
    }
    for (const char* key : {"format", "label", "resize", "augment.padding_mode", "augment.flip_mode"}) {
      json d = json::object();
      const std::string k = key;
      if (k.rfind("augment.", 0) == 0) d["augment"][k.substr(8)] = bad;
      else d[k] = bad;
      if (k == "label") d["format"] = "cifar100";  // the formats these keys belong to
      if (k == "resize") d.update({{"format", "image_folder"}, {"image_size", 32}});
      messages.push_back(error_of([&] { DataOptions::from_json(d, "data"); }));
    }
    for (const json& spec : {json{{"type", "TokenPool"}, {"mode", bad}},
                             json{{"type", "TransformerEncoderLayer"}, {"d_model", 8}, {"nhead", 2}, {"activation", bad}},
                             json{{"type", "ReLU"}, {bad, 1}}})
      messages.push_back(error_of([&] { build_layer(spec, "model.layers[0]"); }));
    messages.push_back(error_of([&] { parse_device(bad); }));
    json c = json::parse(kConfig);
    messages.push_back(error_of([&] { apply_override(c, "model.layers.0.type." + bad + "=1"); }));
    for (const std::string& m : messages) {
      require_clean_message(m, 300);
      if (bad == esc) REQUIRE_THAT(m, Catch::Contains("\\u001b") || Catch::Contains("\\x1b"));
    }
    // An unknown layer type: its message lists the known ones.
    const std::string m = error_of([&] { build_layer(json{{"type", bad}}, "model.layers[0]"); });
    require_clean_message(m, 600);
    if (bad == esc) REQUIRE_THAT(m, Catch::Contains("unknown layer 'red\\x1b[31m'"));
  }
}

TEST_CASE("config integers: range-checked, never wrapped", "[hostile]") {
  auto config_with = [](const std::string& assignment) {
    json c = json::parse(kConfig);
    apply_override(c, assignment);
    return c;
  };
  std::string m = error_of([&] { parse_train_config(config_with("seed=-1")); });
  REQUIRE_THAT(m, Catch::Contains("seed: expected a non-negative integer, got -1"));
  // epochs may be fractional (9.9), so it is a number range-checked as one.
  for (const char* e : {"epochs=18446744073709551615", "epochs=9223372036854775807", "epochs=0", "epochs=-1.5"}) {
    m = error_of([&] { parse_train_config(config_with(e)); });
    REQUIRE_THAT(m, Catch::Contains("epochs: expected a number in (0, 1000000], got"));
  }
  REQUIRE(parse_train_config(config_with("epochs=9.9")).epochs == 9.9);
  // Values are echoed as written, not rounded to 6 digits (1000001 read as "1e+06").
  REQUIRE_THAT(error_of([&] { parse_train_config(config_with("epochs=1000001")); }), Catch::EndsWith("got 1000001"));
  REQUIRE_THAT(error_of([&] { parse_train_config(config_with("loss.label_smoothing=1.0000001")); }),
               Catch::EndsWith("got 1.0000001"));
  REQUIRE_THAT(error_of([&] { parse_train_config(config_with("grad_clip=-0.0")); }), Catch::EndsWith("got -0"));
  m = error_of(
      [] { DataOptions::from_json(json::parse(R"({"format": "image_folder", "image_size": 4097})"), "data"); });
  REQUIRE_THAT(m, Catch::Contains("data.image_size: expected an integer in 1..4096, got 4097"));
  m = error_of([&] { parse_train_config(config_with("batch_size=0")); });
  REQUIRE_THAT(m, Catch::Contains("batch_size: expected an integer in 1..1000000, got 0"));
  m = error_of([] { DataOptions::from_json(json::parse(R"({"augment": {"crop_padding": 4294967297}})"), "data"); });
  REQUIRE_THAT(m, Catch::Contains("data.augment.crop_padding: expected an integer in 0..1023, got 4294967297"));
  m = error_of([] { DataOptions::from_json(json::parse(R"({"augment": {"cutout": -4294967296}})"), "data"); });
  REQUIRE_THAT(m, Catch::Contains("data.augment.cutout: expected an integer in 0..4096"));
  // A list index too long for any list is "past the end", not std::stoul's exception.
  json c = json::parse(kConfig);
  m = error_of([&] { apply_override(c, "model.layers.99999999999999999999999=1"); });
  REQUIRE_THAT(m, Catch::Contains("past the end of the list (1 items)"));
  m = error_of([&] { apply_override(c, "model.layers.x=1"); });
  REQUIRE_THAT(m, Catch::Contains("needs a number"));
  // A string that is not UTF-8 could never be written back to config.json.
  m = error_of([&] { apply_override(c, std::string("output.dir=\xff\xfe", 13)); });
  require_clean_message(m);
  REQUIRE_THAT(m, Catch::Contains("not valid UTF-8"));
  // Found by fuzz_config: a key that is not UTF-8 (its seed is in tests/fuzz/corpus/config).
  m = error_of([&] { apply_override(c, std::string("model.layers.0.o\x8ct=8", 21)); });
  REQUIRE_THAT(m, Catch::Contains("not valid UTF-8"));
  // A --set value written as a number past a double's range is refused as one (not taken as a
  // string of the wrong type, nor an overflow to infinity).
  m = error_of([&] { parse_train_config(config_with("loss.label_smoothing=1e999")); });
  REQUIRE_THAT(m, Catch::Contains("--set 'loss.label_smoothing=1e999': the number is out of range"));
}

TEST_CASE("layers: sizes are bounded before anything is allocated", "[hostile]") {
  auto build = [](const std::string& text) { return build_layer(json::parse(text), "model.layers[0]"); };
  std::string m = error_of([&] {
    build(R"({"type": "Conv2d", "in_channels": 3, "out_channels": 100000000, "kernel_size": 3})");
  });
  REQUIRE_THAT(m, Catch::Contains("model.layers[0]: a weight of shape (100000000, 3, 3, 3) has 2700000000 elements"));
  m = error_of([&] { build(R"({"type": "Linear", "in_features": 4611686018427387904, "out_features": 4})"); });
  REQUIRE_THAT(m, Catch::Contains("model.layers[0].in_features: expected an integer in 1..2147483648"));
  m = error_of([&] {
    build(R"({"type": "Conv2d", "in_channels": 3, "out_channels": 8, "kernel_size": 3, "padding": 4611686018427387904})");
  });
  REQUIRE_THAT(m, Catch::Contains("model.layers[0].padding: expected integers in 0..65536"));
  m = error_of([&] { build(R"({"type": "MaxPool2d", "kernel_size": 2, "stride": 4611686018427387904})"); });
  REQUIRE_THAT(m, Catch::Contains("model.layers[0].stride: expected integers in 1..65536"));
  // No per-type bound: the layer's memory, read from its spec, is refused before anything is
  // allocated, naming the layer.
  m = error_of([&] { build(R"({"type": "BatchNorm2d", "num_features": 4611686018427387904})"); });
  require_clean_message(m);
  REQUIRE_THAT(m, Catch::StartsWith("model.layers[0] (BatchNorm2d"));
  m = error_of([&] { build(R"({"type": "BatchNorm2d", "num_features": 1000000000000})"); });
  REQUIRE_THAT(m, Catch::StartsWith("model.layers[0] (BatchNorm2d 1000000000000): 16000.0 GB of parameters and "
                                    "buffers; the model needs about"));
  // And any host allocation past the memory available is refused at once, with its size.
  m = error_of([] { Tensor::empty({1000000000000}, DType::Float32); });
  REQUIRE_THAT(m, Catch::StartsWith("out of host memory: a tensor of 4000 GB"));
}

TEST_CASE("tensor sizes: checked arithmetic, no signed overflow", "[hostile]") {
  REQUIRE(shape_numel({int64_t{1} << 62, 4, 0}) == 0);
  std::string m = error_of([] { shape_numel({int64_t{1} << 62, 4}); });
  REQUIRE_THAT(m, Catch::Contains("overflows 64 bits"));
  m = error_of([] { Tensor::empty({int64_t{1} << 40, int64_t{1} << 40}); });
  REQUIRE_THAT(m, Catch::Contains("overflows 64 bits"));
  m = error_of([] { Tensor::empty({int64_t{1} << 61}); });  // 2^61 floats: bytes overflow
  REQUIRE_THAT(m, Catch::Contains("tensor bytes"));
}

TEST_CASE("safetensors: shapes past 64 bits, directories and garbage headers", "[hostile]") {
  const std::string dir = temp_dir("safetensors");
  auto file_with_header = [&](const std::string& name, const std::string& header) {
    std::string bytes(8, '\0');
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
    return write_file(dir + "/" + name, bytes + header);
  };
  std::string m = error_of([&] {
    load_safetensors(file_with_header("big.st", R"({"t": {"dtype": "F32", "shape": [9223372036854775808], "data_offsets": [0, 0]}})"));
  });
  REQUIRE_THAT(m, Catch::Contains("beyond 64-bit sizes"));
  m = error_of([&] {
    load_safetensors(file_with_header("strides.st", R"({"t": {"dtype": "F32", "shape": [0, 4611686018427387904, 4], "data_offsets": [0, 0]}})"));
  });
  REQUIRE_THAT(m, Catch::Contains("overflows 64 bits"));
  // A zero anywhere is an empty tensor, however large the other entries.
  SafeTensors st = load_safetensors(
      file_with_header("empty.st", R"({"t": {"dtype": "F32", "shape": [4611686018427387904, 4, 0], "data_offsets": [0, 0]}})"));
  REQUIRE(st.tensors.at(0).second.numel() == 0);
  m = error_of([&] { load_safetensors(file_with_header("deep.st", "{\"__metadata__\": " + nested("[", "]", 100000) + "}")); });
  REQUIRE_THAT(m, Catch::Contains("nested more than 64"));
  m = error_of([&] { load_safetensors(file_with_header("bin.st", std::string("\x01\x02\xff\xfe garbage", 13))); });
  require_clean_message(m);
  m = error_of([&] { load_safetensors(dir); });
  REQUIRE_THAT(m, Catch::Contains("is a directory"));
  m = error_of([&] { load_safetensors(file_with_header("name.st", "{\"" + std::string(5000, 'n') + "\": 5}")); });
  require_clean_message(m);
}

TEST_CASE("checkpoint metadata: every field range-checked", "[hostile]") {
  const std::string dir = temp_dir("checkpoint");
  auto with = [&](const std::string& key, const std::string& value) {
    std::map<std::string, std::string> meta{{"format", "minidl-checkpoint-1"}, {"epoch", "1"}, {"step", "8"},
                                            {"config", kConfig}, {"optimizer", "{}"}};
    meta[key] = value;
    const std::string path = dir + "/" + key + ".safetensors";
    save_safetensors(path, {}, meta);
    return error_of([&] { read_checkpoint_info(path); });
  };
  REQUIRE_THAT(with("epoch", "-5"), Catch::Contains("metadata 'epoch' is -5, expected 0..1000000"));
  REQUIRE_THAT(with("step", "-100"), Catch::Contains("metadata 'step' is -100"));
  REQUIRE_THAT(with("epoch", "1xyz"), Catch::Contains("metadata 'epoch' is '1xyz', expected an integer"));
  REQUIRE_THAT(with("step", "99999999999999999999999"), Catch::Contains("expected an integer"));
  REQUIRE_THAT(with("config", "[1,2]"), Catch::Contains("metadata 'config' is a JSON array, expected an object"));
  REQUIRE_THAT(with("config", nested("[", "]", 100000)), Catch::Contains("nested more than 64"));
  REQUIRE_THAT(with("config", "{not json"), Catch::Contains("metadata 'config' is not valid JSON"));
  REQUIRE_THAT(with("epoch_seen", "5"), Catch::Contains("metadata has no 'epoch_correct'"));
  const std::string m = with("format", std::string("\x01\x1b[31m", 6) + std::string(1000, 'f'));
  require_clean_message(m);
}

TEST_CASE("checkpoint integrity: a changed byte in a tensor makes the file damaged", "[hostile]") {
  const std::string dir = temp_dir("integrity");
  const std::vector<std::pair<std::string, Tensor>> tensors = {
      {"0.weight", Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, {2, 2})},
      {"1.running_var", Tensor::from_vector(std::vector<float>{1, 1}, {2})}};
  std::map<std::string, std::string> meta{{"format", "minidl-checkpoint-1"}, {"epoch", "1"}, {"step", "8"},
                                          {"config", kConfig}, {"optimizer", "{}"}};
  // Written without a checksum (as before it existed): still read.
  const std::string old_file = dir + "/old.safetensors";
  save_safetensors(old_file, tensors, meta);
  REQUIRE_NOTHROW(read_checkpoint_info(old_file));
  meta["tensors_crc32"] = tensors_crc32(tensors);
  REQUIRE(meta["tensors_crc32"].size() == 8);
  const std::string path = dir + "/checkpoint.safetensors";
  save_safetensors(path, tensors, meta);
  REQUIRE_NOTHROW(read_checkpoint_info(path));
  // One bit of the first weight flipped (the data follows the 8-byte length and the header).
  std::string bytes;
  {
    std::ifstream f(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), {});
  }
  uint64_t header = 0;
  for (int i = 0; i < 8; ++i) header |= uint64_t{static_cast<unsigned char>(bytes[i])} << (8 * i);
  bytes[8 + header + 1] ^= 0x10;
  write_file(path, bytes);
  const std::string m = error_of([&] { read_checkpoint_info(path); });
  require_clean_message(m);
  REQUIRE_THAT(m, Catch::StartsWith("checkpoint '" + path + "' is damaged: its tensors' CRC-32 is "));

  // The metadata has a checksum of its own: an edited position or class list is found too.
  const std::string written = dir + "/written.safetensors";
  save_checkpoint_bytes(written, tensor_bytes(tensors), meta);
  REQUIRE_NOTHROW(read_checkpoint_info(written));
  SafeTensors st = load_safetensors(written);
  REQUIRE(st.metadata.count("metadata_crc32"));
  st.metadata["step"] = "9";
  save_safetensors(written, st.tensors, st.metadata);
  const std::string edited = error_of([&] { read_checkpoint_info(written); });
  require_clean_message(edited);
  REQUIRE_THAT(edited, Catch::StartsWith("checkpoint '" + written + "' is damaged: its metadata's CRC-32 is "));
}

TEST_CASE("atomic files: no temp file left behind, stale ones of dead processes removed", "[hostile]") {
  const std::string dir = temp_dir("atomic");
  write_file_atomic(dir + "/a.txt", "hello", "test file");
  REQUIRE(std::ifstream(dir + "/a.txt").good());
  {
    AtomicFile f(dir + "/b.txt", "test file");
    f.write("x", 1);
    REQUIRE(fs::exists(f.temp_path()));
  }  // not committed: the temp file goes, b.txt never appears
  REQUIRE_FALSE(fs::exists(dir + "/b.txt"));
  REQUIRE(std::distance(fs::directory_iterator(dir), fs::directory_iterator()) == 1);

  // A pid that is certainly dead: a child that has exited and been reaped.
  const pid_t child = fork();
  if (child == 0) _exit(0);
  REQUIRE(child > 0);
  waitpid(child, nullptr, 0);
  const std::string dead = "checkpoint.safetensors.tmp." + std::to_string(child);
  const std::string mine = "model.safetensors.tmp." + std::to_string(getpid());
  const std::string init = "model.safetensors.tmp.1";  // pid 1 always runs
  const std::string users = "results.tmp." + std::to_string(child);  // a dead pid, but not a run file's
  for (const auto& n : {dead, mine, init, users, std::string("notes.tmp.txt")}) write_file(dir + "/" + n, "x");
  const std::vector<std::string> removed = remove_stale_temp_files(dir, is_run_file);
  REQUIRE(removed == std::vector<std::string>{dead});
  REQUIRE(fs::exists(dir + "/" + users));
  REQUIRE(is_run_file(dead));
  REQUIRE_FALSE(is_run_file(users));
  REQUIRE_FALSE(is_run_file("notes.tmp.txt"));
  REQUIRE_FALSE(is_run_file("config.json.tmp."));
  REQUIRE_FALSE(fs::exists(dir + "/" + dead));
  REQUIRE(fs::exists(dir + "/" + mine));
  REQUIRE(fs::exists(dir + "/" + init));
  REQUIRE(fs::exists(dir + "/notes.tmp.txt"));
}

TEST_CASE("run log: a failed write (full disk) is an error naming the file", "[hostile]") {
  const std::string dir = temp_dir("full");
  fs::create_symlink("/dev/full", dir + "/metrics.jsonl");
  RunLog log(dir);
  const std::string m = error_of([&] { log.metrics({{"epoch", 1}}); });
  REQUIRE_THAT(m, Catch::Contains("metrics.jsonl") && Catch::Contains("No space left on device"));
  // truncate_jsonl reads only bounded regular files (/dev/zero would never end).
  fs::create_symlink("/dev/zero", dir + "/steps_zero.jsonl");
  REQUIRE_THAT(error_of([&] { truncate_jsonl(dir + "/steps_zero.jsonl", "step", 1, 0); }),
               Catch::Contains("not a regular file"));
}

TEST_CASE("files: a FIFO where a checkpoint, a run log or a config belongs is an error, never a wait", "[hostile]") {
  const std::string dir = temp_dir("fifo");
  for (const char* name : {"checkpoint.safetensors", "steps.jsonl", "log.txt", "config.json"})
    REQUIRE(::mkfifo((dir + "/" + name).c_str(), 0600) == 0);
  REQUIRE_THAT(test::error_in_child([&] { read_checkpoint_info(dir + "/checkpoint.safetensors"); }),
               Catch::Contains("safetensors file '" + dir + "/checkpoint.safetensors' is not a regular file (a FIFO"));
  REQUIRE_THAT(test::error_in_child([&] { check_jsonl(dir + "/steps.jsonl", "step", 0, 0); }),
               Catch::Contains("run log '" + dir + "/steps.jsonl' is not a regular file (a FIFO"));
  REQUIRE_THAT(test::error_in_child([&] { RunLog log(dir); }),
               Catch::Contains("cannot open '" + dir + "/log.txt' for writing: it is a FIFO or a socket"));
  REQUIRE_THAT(test::error_in_child([&] { read_json_file(dir + "/config.json"); }),
               Catch::Contains("config.json' is not a regular file (a FIFO"));
}

TEST_CASE("run log: a torn last line is dropped only when the checkpoint does not need it", "[hostile]") {
  const std::string dir = temp_dir("torn");
  std::string text;
  for (int step = 0; step < 4; ++step) text += nlohmann::json{{"step", step}, {"loss", 1.5}}.dump() + "\n";
  text += "{\"step\": 4, \"lo";  // step 4's record, cut by a crash
  const std::string path = write_file(dir + "/steps.jsonl", text);
  // A checkpoint at step 5 trained steps 0..4: step 4's record is lost, not merely unfinished.
  const std::string needed = "run log '" + path +
                             "': line 5 is not a JSON record, and the checkpoint needs the "
                             "records up to step 4 (the last whole one is step 3)";
  REQUIRE_THAT(error_of([&] { check_jsonl(path, "step", 5, 0); }), Catch::StartsWith(needed));
  REQUIRE_THAT(error_of([&] { truncate_jsonl(path, "step", 5, 0); }), Catch::StartsWith(needed));
  REQUIRE(read_file_limited(path, "run log") == text);
  // A checkpoint at step 4: the torn line was a step past it, and goes.
  truncate_jsonl(path, "step", 4, 0);
  REQUIRE(read_file_limited(path, "run log") == text.substr(0, text.rfind('\n') + 1));
  // metrics.jsonl counts epochs from 1: a checkpoint in epoch 1 needs no record.
  const std::string metrics = write_file(dir + "/metrics.jsonl", "{\"epoch\": 1, \"tra");
  REQUIRE_NOTHROW(check_jsonl(metrics, "epoch", 1, 1));
  REQUIRE_THAT(error_of([&] { check_jsonl(metrics, "epoch", 2, 1); }),
               Catch::Contains("needs the records up to epoch 1 (the last whole one is epoch 0)"));
}

TEST_CASE("class names: control bytes are escaped in the per-class line, UTF-8 text is kept", "[hostile]") {
  const std::vector<std::string> classes = {"caf\xc3\xa9", "red\x1b[31mflag", "two\nlines"};
  const std::string line = class_metrics_line(class_metrics(classes, {1, 0, 0, 0, 1, 0, 0, 1, 1}));
  REQUIRE(line == "caf\xc3\xa9 100.0%, red\\x1b[31mflag 100.0%, two\\x0alines 50.0%");
  for (const char c : line) REQUIRE(static_cast<unsigned char>(c) >= 0x20);
}

TEST_CASE("run folders: a second lock of this process, or a second execute(), says so", "[hostile]") {
  const std::string dir = temp_dir("lock_twice");
  {
    const RunFolderLock first(dir);
    REQUIRE_THAT(error_of([&] { RunFolderLock second(dir); }),
                 Catch::Contains("is in use by another run of this process"));
  }
  REQUIRE_NOTHROW(RunFolderLock(dir));  // released with the first
}
