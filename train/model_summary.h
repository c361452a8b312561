// `minidl summary`: a config's model layer by layer, as torchinfo prints a PyTorch model: each
// layer's output shape, parameters, forward FLOPs and the activation bytes it keeps for backward
// (what training holds between forward and backward), at the config's batch size, in its
// precision and layout on its device, for the model as built from the config (no data is read).
//
// The model runs one training-mode forward at batch 2 and one at batch 4 under a forward observer,
// and every count is scaled linearly to the batch size: each layer's FLOPs and bytes are an affine
// function of the batch (per-image work plus per-call weight reads), so two batches give it
// exactly at any size without running it there.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "train/config.h"

namespace minidl {

struct SummaryRow {
  std::string path;        // "3.1" ("" for the model itself is not a row)
  int depth = 0;           // nesting below the model (0 for the model's own layers)
  std::string layer;       // describe(): "Conv2d 64->128 k3"
  Shape output;            // at the summary's batch size
  int64_t parameters = 0;  // the layer's own, not its children's
  std::optional<double> forward_flops, backward_flops, saved_bytes;  // nullopt: the layer does not say
};

struct ModelSummary {
  int64_t batch_size = 0;
  std::string device, precision, memory_format;
  Shape input;
  std::vector<SummaryRow> rows;
  int64_t parameters = 0, trainable = 0;  // trainable: not frozen at the first step by "freeze"
  double parameter_bytes = 0;
  double forward_flops = 0, backward_flops = 0, saved_bytes = 0;  // over the rows that say
  int64_t rows_without_work = 0;
};

// The summary of `config`'s model at `batch_size` (0: the config's batch_size) on `device`.
ModelSummary summarize_model(const TrainConfig& config, Device device, int64_t batch_size = 0);

std::string summary_text(const ModelSummary& s);
nlohmann::json summary_json(const ModelSummary& s);

}  // namespace minidl
