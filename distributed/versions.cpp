#include <algorithm>

#include "core/error.h"
#include "distributed/communicator.h"

#ifdef MINIDL_HAVE_NCCL
#include <nccl.h>
#endif
#ifdef MINIDL_HAVE_MPI
#include <mpi.h>
#endif

namespace minidl {

std::string communicator_versions() {
  std::string nccl = "NCCL: not built";
#ifdef MINIDL_HAVE_NCCL
  int v = 0;
  // 2.19.3 is 21903 (2.9 on: major * 10000 + minor * 100 + patch).
  if (ncclGetVersion(&v) == ncclSuccess) nccl = str("NCCL ", v / 10000, ".", (v % 10000) / 100, ".", v % 100);
#endif
  std::string mpi = "MPI: not built";
#ifdef MINIDL_HAVE_MPI
  // The start of the library's own text ("Open MPI v4.1.6" of "Open MPI v4.1.6, package: ...",
  // "MPICH Version: 4.0.2" of its first line); callable before MPI_Init.
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  if (MPI_Get_library_version(text, &length) == MPI_SUCCESS) {
    mpi = std::string(text, std::min(static_cast<size_t>(length), sizeof(text)));
    mpi = mpi.substr(0, mpi.find_first_of(std::string(",\r\n\0", 4)));
    std::replace(mpi.begin(), mpi.end(), '\t', ' ');
  }
#endif
  return nccl + ", " + mpi;
}

}  // namespace minidl
