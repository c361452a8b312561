#include "distributed/launch.h"

#include <cstdlib>
#include <sstream>
#include <vector>

#include "core/error.h"

namespace minidl {

namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

int env_int(const char* name, int low) {
  const char* v = env(name);
  MINIDL_CHECK(v, "launcher: ", name, " is not set");
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  MINIDL_CHECK(*end == '\0' && x >= low && x < (1 << 20), "launcher: ", name, "='", v, "' is not a count >= ", low);
  return static_cast<int>(x);
}

struct Scheme {
  const char *size, *rank, *local_rank;
};

}  // namespace

Launch detect_launch() {
  const Scheme schemes[] = {{"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"},
                            {"PMI_SIZE", "PMI_RANK", "MPI_LOCALRANKID"},
                            {"MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_LOCAL_RANK"}};
  Launch l;
  for (const Scheme& s : schemes) {
    if (!env(s.size)) continue;
    l.launcher = s.size;
    l.world_size = env_int(s.size, 1);
    l.rank = env_int(s.rank, 0);
    l.local_rank = env(s.local_rank) ? env_int(s.local_rank, 0) : 0;
    MINIDL_CHECK(l.rank < l.world_size, "launcher: ", s.rank, "=", l.rank, " is not below ", s.size, "=", l.world_size);
    return l;
  }
  // srun sets SLURM_NTASKS in the allocation too; only a step (SLURM_STEP_ID) is a launch.
  if (env("SLURM_STEP_ID") && env("SLURM_NTASKS") && env("SLURM_PROCID")) {
    l.launcher = "SLURM_NTASKS";
    l.world_size = env_int("SLURM_NTASKS", 1);
    l.rank = env_int("SLURM_PROCID", 0);
    l.local_rank = env("SLURM_LOCALID") ? env_int("SLURM_LOCALID", 0) : 0;
    MINIDL_CHECK(l.rank < l.world_size, "launcher: SLURM_PROCID=", l.rank, " is not below SLURM_NTASKS=", l.world_size);
  }
  return l;
}

void select_local_gpu(const Launch& launch) {
  if (launch.world_size <= 1) return;
  std::vector<std::string> visible;
  if (const char* v = env("CUDA_VISIBLE_DEVICES")) {
    std::stringstream in(v);
    for (std::string item; std::getline(in, item, ',');) visible.push_back(item);
  }
  const std::string mine = visible.empty()
                               ? std::to_string(launch.local_rank)
                               : visible[static_cast<size_t>(launch.local_rank) % visible.size()];
  setenv("CUDA_VISIBLE_DEVICES", mine.c_str(), 1);
}

}  // namespace minidl
