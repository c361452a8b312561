// minidl repro's comparison: identical runs pass; a one-bit change in a step's loss or in one
// weight is found and named.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "train/compare_runs.h"
#include "train/run_log.h"
#include "core/safetensors.h"
#include "test_util.h"

using namespace minidl;
namespace fs = std::filesystem;

namespace {

void write_run(const std::string& dir, const std::vector<float>& losses, float weight0) {
  fs::create_directories(dir);
  std::ofstream steps(dir + "/steps.jsonl");
  for (size_t i = 0; i < losses.size(); ++i)
    steps << nlohmann::json{{"step", i}, {"epoch", 0}, {"loss", losses[i]}, {"loss_bits", float_bits_hex(losses[i])}}.dump()
          << "\n";
  save_safetensors(dir + "/model.safetensors",
                   {{"0.weight", Tensor::from_vector(std::vector<float>{weight0, 2.f}, {2})},
                    {"1.bias", Tensor::from_vector(std::vector<float>{3.f}, {1})}});
}

}  // namespace

TEST_CASE("repro comparison finds the first differing step and tensor", "[repro]") {
  const test::TempDir work("repro");
  const std::string root = work.path.string();
  write_run(root + "/a", {2.5f, 2.25f, 2.f}, 1.f);
  write_run(root + "/b", {2.5f, 2.25f, 2.f}, 1.f);
  std::ostringstream same;
  REQUIRE(compare_runs(root + "/a", root + "/b", same));
  REQUIRE_THAT(same.str(), Catch::Contains("all 3 step losses are bit-identical"));

  write_run(root + "/c", {2.5f, std::nextafter(2.25f, 3.f), 2.f}, std::nextafter(1.f, 2.f));
  std::ostringstream diff;
  REQUIRE_FALSE(compare_runs(root + "/a", root + "/c", diff));
  REQUIRE_THAT(diff.str(), Catch::Contains("DIFFERENT loss at step 1"));
  REQUIRE_THAT(diff.str(), Catch::Contains("first differing tensor: 0.weight"));

  write_run(root + "/d", {2.5f, 2.25f}, 1.f);
  std::ostringstream shorter;
  REQUIRE_FALSE(compare_runs(root + "/a", root + "/d", shorter));
  REQUIRE_THAT(shorter.str(), Catch::Contains("DIFFERENT number of steps"));
}
