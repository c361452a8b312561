#include "train/run_log.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <sstream>
#include <vector>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/json_limits.h"
#include "core/regular_file.h"
#include "train/tensorboard.h"
#include "train/text_format.h"

namespace minidl {

namespace {
std::ofstream open_append(const std::string& path) {
  // Opening a FIFO to write would wait for a reader forever.
  struct stat st {};
  MINIDL_CHECK(::stat(path.c_str(), &st) != 0 || !(S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode) || S_ISDIR(st.st_mode)),
               "cannot open '", path, "' for writing: it is ", S_ISDIR(st.st_mode) ? "a folder" : "a FIFO or a socket",
               ", not a file");
  std::ofstream f(path, std::ios::app);
  MINIDL_CHECK(f.good(), "cannot open '", path, "' for writing");
  return f;
}
}  // namespace

RunLog::RunLog(const std::string& dir, bool write)
    : dir_(dir),
      write_(write),
      log_(write ? open_append(dir + "/log.txt") : std::ofstream()),
      metrics_(write ? open_append(dir + "/metrics.jsonl") : std::ofstream()),
      steps_(write ? open_append(dir + "/steps.jsonl") : std::ofstream()),
      tty_(write && isatty(STDERR_FILENO) != 0) {}

void RunLog::check(std::ofstream& f, const char* name) {
  if (f.good()) return;
  const int err = errno;
  f.clear();  // so a later error() can still try to say why
  fail(str("cannot write '", dir_, "/", name, "': ", err ? std::strerror(err) : "write failed"));
}

RunLog::~RunLog() = default;

void RunLog::enable_tensorboard(int64_t start_step) {
  if (!write_) return;
  tensorboard_ = std::make_unique<TensorBoardWriter>(dir_, start_step);
}

void RunLog::line(const std::string& text) { echo(std::cout, text); }

void RunLog::error(const std::string& text) {
  if (!write_) return;
  end_progress_quietly();
  log_ << utc_timestamp() << " error: " << text << std::endl;
}

void RunLog::fatal(const std::string& text) { echo(std::cerr, text); }

void RunLog::echo(std::ostream& terminal, const std::string& text) {
  if (!write_) return;
  end_progress();
  terminal << text << std::endl;
  log_ << utc_timestamp() << " " << text << std::endl;
  check(log_, "log.txt");
}

void RunLog::metrics(const nlohmann::json& record) {
  if (!write_) return;
  metrics_ << record.dump() << std::endl;
  check(metrics_, "metrics.jsonl");
  if (tensorboard_ && record.contains("step") && record["step"].is_number_integer()) {
    // At the epoch's last step (record["step"] counts the steps done): a resume from this
    // epoch's checkpoint starts at record["step"], and TensorBoard keeps what came before it.
    const int64_t last_step = record["step"].get<int64_t>() - 1;
    for (const auto& [tag, value] : tensorboard_epoch_scalars(record, steps_since_metrics_))
      tensorboard_->scalar(tag, last_step, static_cast<float>(value));
    tensorboard_->flush();
  }
  steps_since_metrics_ = 0;
}

void RunLog::eval(const nlohmann::json& record) {
  if (!write_) return;
  if (!evals_.is_open()) evals_ = open_append(dir_ + "/evals.jsonl");
  evals_ << record.dump() << std::endl;
  check(evals_, "evals.jsonl");
  if (!tensorboard_) return;
  for (const auto& [key, value] : record.items())
    if (key != "step" && key != "epoch" && value.is_number())
      tensorboard_->scalar("eval/" + key, record["step"].get<int64_t>(), value.get<float>());
  tensorboard_->flush();
}

void RunLog::step(int64_t step, int64_t epoch, float loss) {
  if (!write_) return;
  nlohmann::json r = {{"step", step}, {"epoch", epoch}, {"loss", loss}, {"loss_bits", float_bits_hex(loss)}};
  steps_ << r.dump() << '\n';
  if (tensorboard_) tensorboard_->scalar(kTensorBoardLossTag, step, loss);
  ++steps_since_metrics_;
}

void RunLog::progress(const std::string& label, int64_t done, int64_t total, double seconds,
                      const std::string& detail) {
  if (!tty_ || total <= 0) return;
  constexpr int kWidth = 20;
  const int filled = static_cast<int>(kWidth * std::min(done, total) / total);
  std::fprintf(stderr, "\r\033[K%s [%s%s] %lld/%lld %s%s%s", label.c_str(), std::string(filled, '#').c_str(),
               std::string(kWidth - filled, '.').c_str(), static_cast<long long>(done), static_cast<long long>(total),
               duration_text(seconds).c_str(), detail.empty() ? "" : " ", detail.c_str());
  std::fflush(stderr);
  progress_open_ = true;
}

void RunLog::end_progress() {
  if (!write_) return;
  steps_.flush();
  check(steps_, "steps.jsonl");
  end_progress_quietly();
}

void RunLog::end_progress_quietly() {
  if (!progress_open_) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
  progress_open_ = false;
}

namespace {

// The lines of a run log, parsed. Only the last line may be torn (a crash mid-write: it is
// dropped, and `*torn` is its number); a line before it that is not JSON means the file was
// damaged, and dropping it and everything after would silently lose records, so it is an error
// naming the line.
std::vector<std::pair<std::string, nlohmann::json>> read_jsonl(const std::string& path, int64_t* torn = nullptr) {
  // Bounded and regular-file-only, like every file minidl reads (a 1 GiB steps.jsonl is 10M steps).
  const std::string text = read_file_limited(path, "run log", size_t{1} << 30);
  std::istringstream in(text);
  std::vector<std::pair<std::string, nlohmann::json>> lines;
  std::string line;
  int64_t number = 0, bad = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.empty()) continue;
    MINIDL_CHECK(bad == 0, "run log '", path, "': line ", bad, " is not a JSON record, and lines follow it (the file ",
                 "was damaged; remove or repair that line to resume)");
    nlohmann::json j;
    bool ok;
    try {
      ok = try_parse_json_limited(line, path, &j);
    } catch (const Error&) {
      ok = false;
    }
    if (ok) lines.push_back({line, std::move(j)});
    else bad = number;
  }
  if (torn) *torn = bad;
  return lines;
}

// The lines of `path` whose `key` is below `limit`. The log holds every record before the
// checkpoint's position (steps.jsonl is flushed before each checkpoint): a torn last line that
// those records end short of held one of them, which is an error as a damaged middle line is.
std::vector<std::string> lines_below(const std::string& path, const std::string& key, int64_t limit, int64_t first) {
  std::vector<std::string> keep;
  int64_t torn = 0, last = first - 1;
  for (const auto& [line, j] : read_jsonl(path, &torn))
    if (j.is_object() && j.contains(key) && j[key].is_number_integer() && j[key].get<int64_t>() < limit) {
      keep.push_back(line);
      last = std::max(last, j[key].get<int64_t>());
    }
  MINIDL_CHECK(torn == 0 || last >= limit - 1, "run log '", path, "': line ", torn, " is not a JSON record, and ",
               "the checkpoint needs the records up to ", key, " ", limit - 1, " (the last whole one is ", key, " ",
               last, "): the file was damaged; repair that line to resume");
  return keep;
}

}  // namespace

void check_jsonl(const std::string& path, const std::string& key, int64_t limit, int64_t first) {
  if (path_exists(path)) lines_below(path, key, limit, first);
}

void truncate_jsonl(const std::string& path, const std::string& key, int64_t limit, int64_t first) {
  if (!path_exists(path)) return;
  std::string out;
  for (const auto& k : lines_below(path, key, limit, first)) out += k + '\n';
  write_file_atomic(path, out, "run log");
}

std::string float_bits_hex(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", bits);
  return buf;
}

}  // namespace minidl
