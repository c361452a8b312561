// The run folder's rules: a fresh run starts only in a missing or empty folder (or with
// --overwrite, which removes the files an earlier run wrote, and nothing else), so two runs never
// interleave their logs; temp files of killed writers are removed when a run starts. The checks
// are made once before anything is loaded and again under the folder's lock, since another run
// may have started, resumed or finished there in between.
#pragma once
#include <sys/types.h>

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace minidl {

// The files `minidl train` writes in its run folder.
const std::vector<std::string>& run_file_names();

// A name `minidl train` writes in its run folder: run_file_names(), kept checkpoints, TensorBoard
// event files, and their temp files left by killed writers (is_run_temp_file).
bool is_run_file(const std::string& name);
// "<a run file>.tmp.<pid>" (core/atomic_file.h); "notes.tmp.txt" or "results.tmp.1" is not one.
bool is_run_temp_file(const std::string& name);

// How a fresh run may start in its folder.
enum class FreshFolder {
  Empty,    // missing or empty
  Replace,  // its run files are to be removed first (run_files_to_replace says why)
};

// Errors, before anything is written, when `dir` holds anything, unless `overwrite` is set or the
// folder holds only the files of a run stopped before its first checkpoint whose config.json is
// `config` (the same command started again) or, with `restart` (--resume DIR --restart), any
// config. The message names what is there and the way forward (--resume, --overwrite, another
// --output).
FreshFolder check_fresh_run_folder(const std::string& dir, bool overwrite, const nlohmann::json& config,
                                   bool restart);
void create_run_folder(const std::string& dir);
// Removes the run files (is_run_file) in `dir`; returns the names removed.
std::vector<std::string> remove_run_files(const std::string& dir);

// An exclusive lock on a run folder (flock on the folder itself, so no file is added), held
// while a run writes there: a second `minidl train` into the same folder fails at once instead
// of interleaving its lines with the first's, and so does a second Run of the same process.
// Released when the process ends, however it ends.
class RunFolderLock {
 public:
  explicit RunFolderLock(const std::string& dir);  // errors when another process holds it
  ~RunFolderLock();
  RunFolderLock(const RunFolderLock&) = delete;
  RunFolderLock& operator=(const RunFolderLock&) = delete;

 private:
  int fd_ = -1;
  std::pair<dev_t, ino_t> id_{};
};

}  // namespace minidl
