#include "core/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/test_hooks.h"

namespace minidl {

namespace fs = std::filesystem;

namespace {

std::string errno_text() { return std::strerror(errno); }

void fsync_directory_of(const std::string& path, const std::string& what) {
  std::string dir = fs::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  MINIDL_CHECK(fd >= 0, "cannot write ", what, " '", path, "': cannot open directory '", dir,
               "' to fsync it: ", errno_text());
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  // Some filesystems cannot fsync a directory (EINVAL): the rename is then as durable as it gets.
  MINIDL_CHECK(rc == 0 || err == EINVAL, "cannot write ", what, " '", path, "': fsync of directory '", dir,
               "' failed: ", std::strerror(err));
}

// The pid in "<name>.tmp.<pid>", or 0 when the name is not of that form.
pid_t temp_file_pid(const std::string& name) {
  const std::string target = temp_file_target(name);
  if (target.empty()) return 0;
  const std::string digits = name.substr(target.size() + 5);
  return digits.size() > 9 ? 0 : static_cast<pid_t>(std::stol(digits));
}

}  // namespace

AtomicFile::AtomicFile(std::string path, std::string what)
    : path_(std::move(path)), what_(std::move(what)), temp_(path_ + ".tmp." + std::to_string(::getpid())) {
  file_ = std::fopen(temp_.c_str(), "wb");
  if (file_ == nullptr) {
    done_ = true;  // nothing of ours to remove
    fail(str("cannot write ", what_, " '", path_, "': cannot create '", temp_, "': ", errno_text()));
  }
}

AtomicFile::~AtomicFile() {
  if (file_ != nullptr) std::fclose(file_);
  if (!done_) std::remove(temp_.c_str());
}

void AtomicFile::write(const void* data, size_t n) {
  MINIDL_ASSERT(file_ != nullptr);
  MINIDL_CHECK(n == 0 || std::fwrite(data, 1, n, file_) == n, "cannot write ", what_, " '", path_,
               "': write to '", temp_, "' failed: ", errno_text());
}

void AtomicFile::commit() {
  MINIDL_ASSERT(file_ != nullptr);
  MINIDL_CHECK(std::fflush(file_) == 0 && ::fsync(::fileno(file_)) == 0, "cannot write ", what_, " '", path_,
               "': flushing '", temp_, "' failed: ", errno_text());
  FILE* f = file_;
  file_ = nullptr;
  MINIDL_CHECK(std::fclose(f) == 0, "cannot write ", what_, " '", path_, "': closing '", temp_,
               "' failed: ", errno_text());
  test_kill_point("write:" + fs::path(path_).filename().string());
  MINIDL_CHECK(std::rename(temp_.c_str(), path_.c_str()) == 0, "cannot write ", what_, " '", path_,
               "': renaming '", temp_, "' over it failed: ", errno_text());
  done_ = true;
  fsync_directory_of(path_, what_);
}

void write_file_atomic(const std::string& path, const std::string& text, const std::string& what) {
  AtomicFile f(path, what);
  f.write(text.data(), text.size());
  f.commit();
}

std::string temp_file_target(const std::string& name) {
  const size_t at = name.rfind(".tmp.");
  if (at == std::string::npos || at == 0) return "";
  const std::string digits = name.substr(at + 5);
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) return "";
  return name.substr(0, at);
}

std::vector<std::string> remove_stale_temp_files(const std::string& dir,
                                                 const std::function<bool(const std::string&)>& ours) {
  std::vector<std::string> removed;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (!entry.is_regular_file(ec)) continue;
    const std::string name = entry.path().filename().string();
    if (!ours(temp_file_target(name))) continue;
    const pid_t pid = temp_file_pid(name);
    // kill(pid, 0) fails with ESRCH only when no such process exists (EPERM: it runs, not ours).
    if (pid <= 0 || pid == ::getpid() || ::kill(pid, 0) == 0 || errno != ESRCH) continue;
    if (fs::remove(entry.path(), ec)) removed.push_back(name);
  }
  return removed;
}

}  // namespace minidl
