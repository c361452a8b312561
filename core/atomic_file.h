// Atomic file replacement, and the clean-up of what interrupted writers leave behind. Bytes go
// to "<path>.tmp.<pid>", which is flushed and fsync'ed, renamed over `path`, and the directory
// is fsync'ed: a crash leaves the old file or the complete new one, never a torn one. The temp
// file is removed when the write fails; one left by a killed process (kill -9, power loss) is
// removed by remove_stale_temp_files(), which the trainer calls on its run folder at start.
#pragma once
#include <cstddef>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace minidl {

class AtomicFile {
 public:
  // `what` names the file in errors ("safetensors file", "summary").
  AtomicFile(std::string path, std::string what);
  ~AtomicFile();  // removes the temp file unless commit() succeeded
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t n);
  void commit();
  const std::string& temp_path() const { return temp_; }

 private:
  std::string path_, what_, temp_;
  FILE* file_ = nullptr;
  bool done_ = false;
};

// Writes `text` to `path` atomically.
void write_file_atomic(const std::string& path, const std::string& text, const std::string& what);

// Removes "<name>.tmp.<pid>" files directly in `dir` whose process no longer runs and whose <name>
// `ours` accepts (the files the caller writes there: a user's "notes.tmp.1" is not one), and returns
// their names. Those of running processes (a concurrent writer) are left alone.
std::vector<std::string> remove_stale_temp_files(const std::string& dir,
                                                 const std::function<bool(const std::string&)>& ours);

// <name> of a "<name>.tmp.<digits>" file name, or "" when the name is not of that form.
std::string temp_file_target(const std::string& name);

}  // namespace minidl
