// What the launcher (mpirun, srun, any PMI launcher) told this process through its environment,
// read before MPI or CUDA start: the GPU a rank uses must be chosen before CUDA initializes.
#pragma once
#include <string>

namespace minidl {

struct Launch {
  int world_size = 1;
  int rank = 0;
  int local_rank = 0;        // the rank among those on this machine: it picks the GPU
  std::string launcher;      // the variable that said so ("OMPI_COMM_WORLD_SIZE"), "" for none
};

// OpenMPI's OMPI_COMM_WORLD_*, MPICH/Hydra's PMI_* (MPI_LOCALRANKID), MVAPICH's MV2_COMM_WORLD_*,
// Slurm's SLURM_NTASKS/SLURM_PROCID/SLURM_LOCALID inside an srun step; world size 1 without any.
// A malformed value is an error naming the variable.
Launch detect_launch();

// Makes CUDA see one GPU, the local rank's: CUDA_VISIBLE_DEVICES narrowed to its local_rank-th
// entry (or set to local_rank). Call before anything touches CUDA; a no-op at world size 1.
void select_local_gpu(const Launch& launch);

}  // namespace minidl
