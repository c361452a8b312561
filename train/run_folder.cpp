#include "train/run_folder.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <set>
#include <system_error>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/json_limits.h"
#include "train/checkpoint.h"

namespace minidl {

namespace fs = std::filesystem;

const std::vector<std::string>& run_file_names() {
  static const std::vector<std::string> names = {
      "config.json",       "log.txt",          "metrics.jsonl", "steps.jsonl",  "checkpoint.safetensors",
      "model.safetensors", "best.safetensors", "summary.json",  "profile.json", "trace.json",
      "classes.json",      "eval.json",        "evals.jsonl"};
  return names;
}

bool is_run_temp_file(const std::string& name) {
  const std::string target = temp_file_target(name);
  return !target.empty() && is_run_file(target);
}

bool is_run_file(const std::string& name) {
  const auto& names = run_file_names();
  return std::find(names.begin(), names.end(), name) != names.end() || is_kept_checkpoint_name(name) ||
         name.rfind("events.out.tfevents.", 0) == 0 || is_run_temp_file(name);
}

FreshFolder check_fresh_run_folder(const std::string& dir, bool overwrite, const nlohmann::json& config,
                                   bool restart) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return FreshFolder::Empty;
  MINIDL_CHECK(fs::is_directory(dir, ec), "output folder '", dir, "' exists and is not a folder");
  std::vector<std::string> held;
  for (const auto& e : fs::directory_iterator(dir, ec)) held.push_back(e.path().filename().string());
  MINIDL_CHECK(!ec, "cannot list output folder '", dir, "': ", ec.message());
  if (held.empty()) return FreshFolder::Empty;
  if (overwrite) return FreshFolder::Replace;
  std::sort(held.begin(), held.end());
  const bool has_checkpoint = std::any_of(held.begin(), held.end(), [](const std::string& n) {
    return n == "checkpoint.safetensors" || is_kept_checkpoint_name(n);
  });
  const bool only_run_files = std::all_of(held.begin(), held.end(), is_run_file);
  // A run killed before its first checkpoint left only its config and logs: nothing to resume,
  // nothing of the user's to lose.
  const bool no_checkpoint_run = !has_checkpoint && only_run_files &&
                                 std::count(held.begin(), held.end(), "config.json") > 0;
  if (no_checkpoint_run) {
    if (restart) return FreshFolder::Replace;
    nlohmann::json earlier;
    const std::string path = dir + "/config.json";
    if (try_parse_json_limited(read_file_limited(path, "run config"), path, &earlier) && earlier == config)
      return FreshFolder::Replace;
  }
  std::string list;
  for (size_t i = 0; i < held.size() && i < 5; ++i) list += (i ? ", " : "") + text_excerpt(held[i]);
  if (held.size() > 5) list += str(" and ", held.size() - 5, " more");
  if (restart)
    fail(str("--restart: run folder '", dir, "' ",
             has_checkpoint ? str("has a checkpoint: continue it with --resume ", dir,
                                  ", or start it over with --config ", dir, "/config.json --output ", dir,
                                  " --overwrite")
                            : str("holds files that are not a run's (", list, "); remove them or choose another --output")));
  fail(str("output folder '", dir, "' is not empty (", list, "): ",
           has_checkpoint ? str("pass --resume ", dir, " to continue its run, ") : std::string(),
           no_checkpoint_run ? "its run stopped before its first checkpoint with another config; " : "",
           "pass --overwrite to replace ", has_checkpoint ? "it" : "its run files", ", or choose another --output"));
}

namespace {

// The folders this process has locked, as (device, inode): flock() cannot tell a second lock of
// this process from another process's, and the message would blame another process.
std::mutex held_mutex;
std::set<std::pair<dev_t, ino_t>>& held_folders() {
  static std::set<std::pair<dev_t, ino_t>> held;
  return held;
}

}  // namespace

RunFolderLock::RunFolderLock(const std::string& dir) {
  fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  MINIDL_CHECK(fd_ >= 0, "cannot open run folder '", dir, "': ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    fail(str("cannot open run folder '", dir, "': ", std::strerror(err)));
  }
  const std::lock_guard<std::mutex> guard(held_mutex);
  if (held_folders().count({st.st_dev, st.st_ino}) > 0) {
    ::close(fd_);
    fd_ = -1;
    fail(str("run folder '", dir, "' is in use by another run of this process (one Run per folder at a time)"));
  }
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    fail(str("run folder '", dir, "' is in use by another minidl process",
             err == EWOULDBLOCK ? "" : str(" (flock: ", std::strerror(err), ")")));
  }
  id_ = {st.st_dev, st.st_ino};
  held_folders().insert(id_);
}

RunFolderLock::~RunFolderLock() {
  if (fd_ < 0) return;
  {
    const std::lock_guard<std::mutex> guard(held_mutex);
    held_folders().erase(id_);
  }
  ::close(fd_);
}

void create_run_folder(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  MINIDL_CHECK(!ec, "cannot create output folder '", dir, "': ", ec.message());
}

std::vector<std::string> remove_run_files(const std::string& dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  std::vector<fs::path> paths;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (is_run_file(e.path().filename().string())) paths.push_back(e.path());
  MINIDL_CHECK(!ec, "cannot list the run folder '", dir, "': ", ec.message());
  std::sort(paths.begin(), paths.end());
  for (const fs::path& p : paths) {
    if (fs::remove(p, ec)) removed.push_back(p.filename().string());
    MINIDL_CHECK(!ec, "cannot remove '", p.string(), "': ", ec.message());
  }
  return removed;
}

}  // namespace minidl
