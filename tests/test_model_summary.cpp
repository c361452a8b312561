// minidl summary (train/model_summary.h): the counts at a batch size it did not run are those of
// an affine function of the batch, checked against batch sizes it did run, for a CNN and a ViT.
#include "test_util.h"
#include "train/config.h"
#include "train/model_summary.h"

using namespace minidl;

namespace {

TrainConfig shipped(const std::string& name) {
  TrainConfig c = parse_train_config(read_json_file(std::string(MINIDL_SOURCE_DIR) + "/configs/" + name));
  return resolve_for_device(c, Device::cpu());
}

}  // namespace

TEST_CASE("summary: counts at a batch it did not run follow from the batches it ran", "[summary]") {
  for (const char* name : {"quick_cpu.json", "vit_tiny_cpu.json"}) {
    INFO(name);
    const TrainConfig c = shipped(name);
    // At 2 and 3 the counts are measured (batches 2 and 3 run); at 8 they are scaled from 2 and 4.
    const ModelSummary s2 = summarize_model(c, Device::cpu(), 2);
    const ModelSummary s3 = summarize_model(c, Device::cpu(), 3);
    const ModelSummary s8 = summarize_model(c, Device::cpu(), 8);
    REQUIRE(s8.rows.size() == s2.rows.size());
    REQUIRE(s8.rows.size() == s3.rows.size());
    int64_t own = 0;
    for (size_t i = 0; i < s8.rows.size(); ++i) {
      const SummaryRow &a = s2.rows[i], &b = s3.rows[i], &r = s8.rows[i];
      INFO(r.path << " " << r.layer);
      own += r.parameters;
      CHECK(r.output.at(0) == 8);
      REQUIRE(r.forward_flops.has_value() == a.forward_flops.has_value());
      if (!r.forward_flops) continue;
      CHECK(*r.forward_flops == Approx(*a.forward_flops + 6 * (*b.forward_flops - *a.forward_flops)));
      CHECK(*r.backward_flops == Approx(*a.backward_flops + 6 * (*b.backward_flops - *a.backward_flops)));
      CHECK(*r.saved_bytes == Approx(*a.saved_bytes + 6 * (*b.saved_bytes - *a.saved_bytes)));
    }
    CHECK(own == s8.parameters);
    CHECK(s8.forward_flops > 0);
  }
  const ModelSummary q = summarize_model(shipped("quick_cpu.json"), Device::cpu());
  CHECK(q.batch_size == 128);
  CHECK(q.parameters == 94752);
  CHECK_THAT(summary_text(q), Catch::Contains("parameters: 94,752 (379.01 KB), 94,752 trainable"));
  // The first Conv2d: 2 * 27 multiply-adds per output, 128 x 32 x 32 x 32 outputs.
  CHECK(*q.rows.at(0).forward_flops == Approx(2.0 * 27 * 128 * 32 * 32 * 32));
}
