// `minidl --version`: the version, the git commit and flags of the build (generated at build time
// by cmake/build_info.cmake), and the CUDA, cuDNN, NCCL and MPI libraries it runs with.
#include "apps/commands.h"
#include "build_info.h"
#include "core/versions.h"
#include "distributed/communicator.h"

namespace minidl {

std::string version_text() {
  return std::string("minidl ") + MINIDL_VERSION + " (git " + MINIDL_GIT_COMMIT + ")\n" + cuda_versions() + "\n" +
         communicator_versions() + "\nbuild: " + MINIDL_BUILD_FLAGS;
}

}  // namespace minidl
