#include "core/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace minidl {

File open_regular_file(const std::string& path, const std::string& what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  MINIDL_CHECK(fd >= 0, "cannot open ", what, " '", path, "': ", std::strerror(errno));
  struct stat st {};
  const bool stated = ::fstat(fd, &st) == 0;
  const int stat_errno = errno;
  if (!stated || !S_ISREG(st.st_mode)) {
    ::close(fd);
    MINIDL_CHECK(stated, "cannot open ", what, " '", path, "': ", std::strerror(stat_errno));
    MINIDL_CHECK(!S_ISDIR(st.st_mode), what, " '", path, "' is a directory, not a file");
    fail(str(what, " '", path, "' is not a regular file (a FIFO, a device or a socket)"));
  }
  // A regular file never blocks; the stream reads it in the ordinary blocking mode.
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  File f(::fdopen(fd, "rb"));
  if (!f) {
    const int err = errno;
    ::close(fd);
    fail(str("cannot open ", what, " '", path, "': ", std::strerror(err)));
  }
  return f;
}

bool path_exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

}  // namespace minidl
