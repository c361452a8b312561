// What a run writes as it goes: human lines to stdout and log.txt (there after their UTC time,
// "2026-12-07T09:41:05Z epoch 1/6 ..."), JSON lines to metrics.jsonl
// (one per epoch) and steps.jsonl (one per step, the loss with its exact bits for `minidl repro`).
// Every line is flushed when written, so a crash loses nothing that was printed, and a failed
// write (a full disk) is an error naming the file, not a silently shorter log.
#pragma once
#include <cstdint>
#include <fstream>
#include <memory>
#include <ostream>
#include <nlohmann/json.hpp>
#include <string>

namespace minidl {

class TensorBoardWriter;

class RunLog {
 public:
  // Opens the files in `dir` for appending (the folder must exist). With write false (a data-
  // parallel rank other than 0) it opens nothing and every call does nothing: one rank speaks.
  explicit RunLog(const std::string& dir, bool write = true);
  ~RunLog();
  // From now on also writes TensorBoard scalars (train/tensorboard.h) into the folder: every
  // step's loss, and each metrics record's values at its step. `start_step`: the first step this
  // process trains (a resume's checkpoint step). Epoch scalars go at the epoch's last step
  // (the metrics record's "step" - 1, that step's index in steps.jsonl).
  void enable_tensorboard(int64_t start_step);
  void line(const std::string& text);                 // stdout + log.txt
  void error(const std::string& text);                // log.txt only ("error: ..."; stderr is the caller's)
  void fatal(const std::string& text);                // stderr + log.txt: the run stops, the message is its own
  void metrics(const nlohmann::json& record);         // metrics.jsonl
  // An evaluation inside an epoch (eval.every_steps) to evals.jsonl, opened on the first, and its
  // numbers to TensorBoard as eval/<key> at record["step"].
  void eval(const nlohmann::json& record);
  void step(int64_t step, int64_t epoch, float loss);  // steps.jsonl
  // A progress line on stderr, redrawn in place when stderr is a terminal (no-op otherwise):
  //   epoch 2/10 [#########.....] 260/390 0:41 loss 0.9132 1220 img/s lr 0.0400 ETA 7m12s
  // `detail`: what follows the bar and the elapsed seconds (train/progress.h).
  void progress(const std::string& label, int64_t done, int64_t total, double seconds, const std::string& detail);
  void end_progress();  // also flushes steps.jsonl
  bool interactive() const { return tty_; }  // progress lines are shown (stderr is a terminal)

 private:
  void check(std::ofstream& f, const char* name);
  // `text` on the terminal stream and in log.txt (line, fatal).
  void echo(std::ostream& terminal, const std::string& text);
  void end_progress_quietly();  // clears the bar without flushing or checking
  std::string dir_;
  bool write_;
  std::ofstream log_, metrics_, steps_, evals_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
  int64_t steps_since_metrics_ = 0;  // step() calls since the last metrics(): the epoch's steps
  bool tty_;
  bool progress_open_ = false;
};

// Keeps only the JSON lines of `path` whose `key` is below `limit` (resume: forget what a
// resumed run will redo). A missing file is fine. The records from `first` (0 for steps, 1 for
// epochs) to limit - 1 are the checkpoint's: a torn last line is dropped unless they end short of
// limit - 1 (it held one of them); that and a damaged line with lines after it are errors
// (check_jsonl finds them without changing anything).
void truncate_jsonl(const std::string& path, const std::string& key, int64_t limit, int64_t first);
void check_jsonl(const std::string& path, const std::string& key, int64_t limit, int64_t first);

// "3f8a1b2c": the bits of a float, for bit-exact comparisons in text.
std::string float_bits_hex(float v);

}  // namespace minidl
