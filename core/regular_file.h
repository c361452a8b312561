// Opening files to read without ever blocking. open() of a FIFO for reading waits for a writer,
// forever for a FIFO left where a run file, a checkpoint or a cache belongs, and a stop signal is
// then not answered either: the readers open through this, which opens without blocking, refuses
// anything but a regular file (a FIFO, a device, a folder) with a message, then reads as usual.
#pragma once
#include <cstdio>
#include <memory>
#include <string>

namespace minidl {

struct FileCloser {
  void operator()(FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<FILE, FileCloser>;

// The regular file at `path`, open for reading ("rb"). Errors name `what` and the path: "cannot
// open WHAT 'PATH': <reason>", "WHAT 'PATH' is a directory, not a file", "WHAT 'PATH' is not a
// regular file (a FIFO, a device or a socket)".
File open_regular_file(const std::string& path, const std::string& what);

// Whether anything (a file, a folder, a FIFO, a dangling link) is at `path`.
bool path_exists(const std::string& path);

}  // namespace minidl
