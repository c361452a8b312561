// `minidl export` trusts nothing it reads or writes over: the targets of --onnx and --logits
// (a device, a FIFO, a folder, the run's own files), the run's model.safetensors (a flipped bit, a
// statistic no run produces) and its config.json (an edited model).
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/error.h"
#include "core/safetensors.h"
#include "apps/export_command.h"
#include "test_util.h"
#include "train/run.h"

using namespace minidl;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

// quick_cpu for one epoch of 2 steps into `dir`.
void train_run(const std::string& dir) {
  RunOptions o;
  o.config_path = std::string(MINIDL_SOURCE_DIR) + "/configs/quick_cpu.json";
  o.overrides = {
      "data.dir=" + test::data_dir(), "data.train_limit=256", "data.test_limit=100", "epochs=1", "eval.tta=none",
      "output.progress=false"};
  o.output_dir = dir;
  REQUIRE(Run(o).execute().exit_code == 0);
}

ExportOptions export_of(const std::string& run, const std::string& onnx) {
  ExportOptions e;
  e.run_dir = run;
  e.onnx_path = onnx;
  return e;
}

}  // namespace

TEST_CASE("export: targets that exist and are not a new file's place are refused, touching nothing",
          "[export][hostile]") {
  MINIDL_REQUIRE_DATA();
  test::TempDir tmp("export_targets");
  const std::string run = tmp.file("run");
  train_run(run);
  const std::string checkpoint = slurp(run + "/checkpoint.safetensors");
  REQUIRE_THAT(test::error_of([&] { export_command(export_of(run, run + "/checkpoint.safetensors")); }),
               Catch::Contains("is a file of the run " + run));
  REQUIRE(slurp(run + "/checkpoint.safetensors") == checkpoint);
  REQUIRE(::mkfifo(tmp.file("fifo").c_str(), 0600) == 0);
  REQUIRE_THAT(test::error_of([&] { export_command(export_of(run, tmp.file("fifo"))); }),
               Catch::Contains("exists and is not a regular file (a device, FIFO or socket)"));
  REQUIRE(fs::is_fifo(tmp.file("fifo")));
  ExportOptions logits = export_of(run, tmp.file("model.onnx"));
  logits.logits_path = "/dev/null";
  REQUIRE_THAT(test::error_of([&] { export_command(logits); }),
               Catch::Contains("--logits /dev/null: exists and is not a regular file"));
  REQUIRE(fs::is_character_file("/dev/null"));
  logits.logits_path = tmp.path.string();
  REQUIRE_THAT(test::error_of([&] { export_command(logits); }), Catch::Contains("is not a regular file (a folder)"));
  REQUIRE_FALSE(fs::exists(tmp.file("model.onnx")));
  REQUIRE(export_command(export_of(run, tmp.file("model.onnx"))) == 0);
}

TEST_CASE("export: an edited config.json or a damaged model.safetensors is refused", "[export][hostile]") {
  MINIDL_REQUIRE_DATA();
  test::TempDir tmp("export_integrity");
  const std::string run = tmp.file("run");
  train_run(run);
  const std::string weights = run + "/model.safetensors", config = run + "/config.json";
  const std::string good_weights = slurp(weights), good_config = slurp(config);
  REQUIRE(export_command(export_of(run, tmp.file("a.onnx"))) == 0);

  // The Scale after the head edited: the same shapes, another model.
  json j = json::parse(good_config);
  j["model"]["layers"][11]["value"] = 0.5;
  write(config, j.dump(2));
  REQUIRE_THAT(test::error_of([&] { export_command(export_of(run, tmp.file("b.onnx"))); }),
               Catch::Contains("'" + config + "' does not describe the model the run trained"));
  write(config, good_config);

  // One bit of the first weight flipped.
  std::string bytes = good_weights;
  uint64_t header = 0;
  for (int i = 0; i < 8; ++i) header |= uint64_t{static_cast<unsigned char>(bytes[static_cast<size_t>(i)])} << (8 * i);
  bytes[8 + header + 2] ^= 0x40;
  write(weights, bytes);
  REQUIRE_THAT(test::error_of([&] { export_command(export_of(run, tmp.file("c.onnx"))); }),
               Catch::StartsWith("weights file '" + weights + "' is damaged: its tensors' CRC-32 is "));

  // A NaN running variance, in a file without checksums (made by hand, or before they existed).
  SafeTensors st = load_safetensors(run + "/checkpoint.safetensors");
  std::vector<std::pair<std::string, Tensor>> model_only;
  for (auto& [name, t] : st.tensors)
    if (name.rfind("optimizer.", 0) != 0) model_only.emplace_back(name, t);
  for (auto& [name, t] : model_only)
    if (name == "1.running_var") t.data<float>()[3] = std::nanf("");
  save_safetensors(weights, model_only, {{"format", "pt"}});
  REQUIRE_THAT(test::error_of([&] { export_command(export_of(run, tmp.file("d.onnx"))); }),
               Catch::Contains("1.running_var[3] is nan, which no run produces"));
  for (const char* name : {"b.onnx", "c.onnx", "d.onnx"}) REQUIRE_FALSE(fs::exists(tmp.file(name)));
}
