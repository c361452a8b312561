// The run folder's rules: a fresh run starts only in a missing or empty folder (or with
// --overwrite, which removes the files an earlier run wrote, and nothing else), so two runs never
// interleave their logs; temp files of killed writers are removed when a run starts.
#pragma once
#include <string>
#include <vector>

namespace minidl {

// The files `minidl train` writes in its run folder.
const std::vector<std::string>& run_file_names();

// Errors, before anything is written, when `dir` holds anything and `overwrite` is false; the
// message names what is there and the way forward (--resume, --overwrite, another --output).
void check_fresh_run_folder(const std::string& dir, bool overwrite);
void create_run_folder(const std::string& dir);
// --overwrite: removes the run files (run_file_names()) in `dir`; returns the names removed.
std::vector<std::string> remove_run_files(const std::string& dir);

// An exclusive lock on a run folder (flock on the folder itself, so no file is added), held
// while a run writes there: a second `minidl train` into the same folder fails at once instead
// of interleaving its lines with the first's. Released when the process ends, however it ends.
class RunFolderLock {
 public:
  explicit RunFolderLock(const std::string& dir);  // errors when another process holds it
  ~RunFolderLock();
  RunFolderLock(const RunFolderLock&) = delete;
  RunFolderLock& operator=(const RunFolderLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace minidl
