#include "train/predict.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "core/error.h"
#include "core/json_limits.h"
#include "data/image_decode.h"
#include "train/trained_run.h"

namespace minidl {

namespace {

// The files decoded and fitted to S x S, as a data set the evaluation loader reads.
Dataset decode_files(const std::vector<std::string>& files, int64_t s, FitMode mode) {
  const auto n = static_cast<int64_t>(files.size());
  Dataset d;
  d.images = Tensor::empty({n, 3, s, s}, DType::UInt8);
  d.labels = Tensor::zeros({n}, DType::Int32);
  uint8_t* images = d.images.data<uint8_t>();
  std::vector<std::string> errors(files.size());
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < n; ++i) {
    try {
      fit_to_square(decode_image_file(files[static_cast<size_t>(i)]), static_cast<int>(s), mode,
                    images + i * 3 * s * s);
    } catch (const std::exception& e) {
      errors[static_cast<size_t>(i)] = e.what();
    }
  }
  for (const std::string& e : errors) MINIDL_CHECK(e.empty(), "predict: ", e);
  return d;
}

}  // namespace

std::vector<Prediction> predict_images(TrainedRun& run, const std::vector<std::string>& files, int64_t top_k,
                                       TtaMode tta) {
  MINIDL_CHECK(!files.empty(), "predict: no image files given");
  MINIDL_CHECK(top_k >= 1, "predict: --top-k must be at least 1, got ", top_k);
  const Dataset images = decode_files(files, run.image_size(), run.data().resize);
  const std::vector<float> logits = run.every_image_logits(images, tta);
  const double weights = run.view_weight_sum(tta);
  const int64_t k = run.num_classes();
  std::vector<Prediction> out;
  for (size_t i = 0; i < files.size(); ++i) {
    const float* row = logits.data() + static_cast<int64_t>(i) * k;
    const double top = *std::max_element(row, row + k) / weights;
    std::vector<double> p(static_cast<size_t>(k));
    double sum = 0;
    for (int64_t c = 0; c < k; ++c) sum += p[static_cast<size_t>(c)] = std::exp(row[c] / weights - top);
    std::vector<int64_t> order(static_cast<size_t>(k));
    std::iota(order.begin(), order.end(), 0);
    // Ties keep the lower index first, as argmax takes the first maximum.
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return row[a] > row[b]; });
    Prediction pred;
    pred.image = files[i];
    for (int64_t j = 0; j < std::min(top_k, k); ++j)
      pred.top.push_back({order[static_cast<size_t>(j)], p[static_cast<size_t>(order[static_cast<size_t>(j)])] / sum});
    out.push_back(std::move(pred));
  }
  return out;
}

std::string prediction_lines(const TrainedRun& run, const std::vector<Prediction>& predictions) {
  std::string out;
  for (const Prediction& p : predictions) {
    out += text_excerpt(p.image, 300) + ":";
    for (size_t j = 0; j < p.top.size(); ++j) {
      char pct[32];
      std::snprintf(pct, sizeof(pct), " %.1f%%", 100.0 * p.top[j].probability);
      out += (j ? ", " : " ") + text_excerpt(run.classes()[static_cast<size_t>(p.top[j].index)], 100) + pct;
    }
    out += "\n";
  }
  return out;
}

nlohmann::json prediction_json(const TrainedRun& run, const std::vector<Prediction>& predictions) {
  nlohmann::json out = nlohmann::json::array();
  for (const Prediction& p : predictions) {
    nlohmann::json top = nlohmann::json::array();
    for (const Prediction::Guess& g : p.top)
      top.push_back(
          {{"class", run.classes()[static_cast<size_t>(g.index)]}, {"index", g.index}, {"probability", g.probability}});
    out.push_back({{"image", p.image}, {"top", top}});
  }
  return out;
}

}  // namespace minidl
