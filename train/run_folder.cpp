#include "train/run_folder.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "core/error.h"
#include "core/json_limits.h"

namespace minidl {

namespace fs = std::filesystem;

const std::vector<std::string>& run_file_names() {
  static const std::vector<std::string> names = {
      "config.json",  "log.txt", "metrics.jsonl", "steps.jsonl", "checkpoint.safetensors", "model.safetensors",
      "summary.json", "profile.json", "trace.json", "classes.json"};
  return names;
}

void check_fresh_run_folder(const std::string& dir, bool overwrite) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return;
  MINIDL_CHECK(fs::is_directory(dir, ec), "output folder '", dir, "' exists and is not a folder");
  if (overwrite) return;
  std::vector<std::string> held;
  for (const auto& e : fs::directory_iterator(dir, ec)) held.push_back(e.path().filename().string());
  MINIDL_CHECK(!ec, "cannot list output folder '", dir, "': ", ec.message());
  if (held.empty()) return;
  std::sort(held.begin(), held.end());
  std::string list;
  for (size_t i = 0; i < held.size() && i < 5; ++i) list += (i ? ", " : "") + text_excerpt(held[i]);
  if (held.size() > 5) list += str(" and ", held.size() - 5, " more");
  const bool has_checkpoint = std::count(held.begin(), held.end(), "checkpoint.safetensors") > 0;
  fail(str("output folder '", dir, "' is not empty (", list, "): ",
           has_checkpoint ? str("pass --resume ", dir, " to continue its run, ") : std::string(),
           "pass --overwrite to replace ", has_checkpoint ? "it" : "its run files", ", or choose another --output"));
}

RunFolderLock::RunFolderLock(const std::string& dir) {
  fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  MINIDL_CHECK(fd_ >= 0, "cannot open run folder '", dir, "': ", std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    fail(str("run folder '", dir, "' is in use by another minidl process",
             err == EWOULDBLOCK ? "" : str(" (flock: ", std::strerror(err), ")")));
  }
}

RunFolderLock::~RunFolderLock() {
  if (fd_ >= 0) ::close(fd_);
}

void create_run_folder(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  MINIDL_CHECK(!ec, "cannot create output folder '", dir, "': ", ec.message());
}

std::vector<std::string> remove_run_files(const std::string& dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  for (const std::string& name : run_file_names()) {
    const fs::path p = fs::path(dir) / name;
    if (fs::remove(p, ec)) removed.push_back(name);
    MINIDL_CHECK(!ec, "--overwrite: cannot remove '", p.string(), "': ", ec.message());
  }
  return removed;
}

}  // namespace minidl
