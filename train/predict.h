// `minidl predict`: a trained run's top classes for image files (JPEG or PNG, any size), each
// decoded and fitted to the run's image size with its resize mode, normalized as its test images
// were (train/trained_run.h).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/tta.h"

namespace minidl {

class TrainedRun;

struct Prediction {
  std::string image;  // the file
  struct Guess {
    int64_t index;
    double probability;  // softmax of the views' mean logits
  };
  std::vector<Guess> top;  // the k most probable classes, most probable first
};

// Decodes every file first (an error names the first one that is missing, not an image, corrupt
// or too large), then classifies them in batches of the run's eval.batch_size.
std::vector<Prediction> predict_images(TrainedRun& run, const std::vector<std::string>& files, int64_t top_k,
                                       TtaMode tta);

// One line per image: "FILE: cat 91.2%, dog 6.1%, ..." (class names escaped as printable text).
std::string prediction_lines(const TrainedRun& run, const std::vector<Prediction>& predictions);
// [{"image": FILE, "top": [{"class": NAME, "index": I, "probability": P}, ...]}, ...]
nlohmann::json prediction_json(const TrainedRun& run, const std::vector<Prediction>& predictions);

}  // namespace minidl
