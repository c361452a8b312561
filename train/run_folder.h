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
// Creates `dir`; with `overwrite`, removes the run files (run_file_names()) in it. Returns the
// names removed.
std::vector<std::string> prepare_fresh_run_folder(const std::string& dir, bool overwrite);

}  // namespace minidl
