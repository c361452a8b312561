// `minidl eval`: a trained run's accuracy on a split of its data (or of another copy of it):
// top-1 and top-5 accuracy, per-class precision and recall, and the confusion matrix, from the
// same eval-mode logits the run's evaluation computed (train/trained_run.h), so a run evaluated on
// its test set gives the accuracy its last epoch printed; a language model's loss and perplexity.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/cifar10.h"
#include "data/tta.h"

namespace minidl {

class TrainedRun;

// The split of the run's data to evaluate: its data section with data.dir replaced by `data_dir`
// when given (another copy of the data, in the same layout), and at most `limit` images (0: the
// split's data.test_limit or train_limit as the run had them). Split::Val is the run's validation
// split: the images data.val_fraction held out of its training set, or an image folder's val/. `dir`, when given, receives the
// folder read (data.dir, or CIFAR10_DIR for a CIFAR run without one).
Dataset evaluation_data(const TrainedRun& run, const std::string& data_dir, Split split, int64_t limit,
                        std::string* dir = nullptr);

// The metrics of `run` on `data` (whose classes must be the run's), as eval.json holds them:
//   {"images", "accuracy", "loss" (of the plain logits, the run's label smoothing included),
//    "top5_accuracy" (top-k with k = min(5, classes)), "tta",
//    "accuracy_tta" (with a TTA), "classes", "precision", "recall", "support", "confusion"}
// Per-class figures and the confusion matrix (row: true class, column: predicted) come from the
// TTA logits when there is a TTA, as the run's per-class metrics do; a precision without any
// prediction of the class is null.
nlohmann::json evaluate_run(TrainedRun& run, const Dataset& data, TtaMode tta);

// A language model's run on token windows (its val.bin: the test split), as its evaluation
// computed them: {"windows", "seq_len", "tokens", "loss", "perplexity", "accuracy" (of tokens)}.
nlohmann::json evaluate_language_model(TrainedRun& run, const Dataset& windows);

// What `minidl eval` prints (a language model's: its loss, perplexity and token accuracy): the accuracies, a table of the classes (the worst 5 and best 5 of
// more than 20) and, for 20 classes or fewer, the confusion matrix.
std::string evaluation_text(const nlohmann::json& metrics);

}  // namespace minidl
