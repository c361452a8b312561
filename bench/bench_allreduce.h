// `minidl bench allreduce`: the ordered gradient reduction (distributed/ordered_reduce.h) against the
// engine's own all-reduce (ncclAllReduce or MPI_Allreduce) on the same communicator, per message
// size. Run it under the launcher the training uses:
//   mpirun -np 8 minidl bench allreduce [--device cuda|cpu] [--dist auto|single|mpi|nccl]
//                                       [--max-mib M] [--iters N]
// Rank 0 prints, for float32 messages of 4 KiB .. M MiB (x4 steps): the time per call, the
// algorithm bandwidth (bytes / time) and the bus bandwidth (x 2(N-1)/N, nccl-tests' convention:
// what each link carries in a ring all-reduce; 0 at world size 1) of both, and their ratio.
#pragma once
#include <cstdint>
#include <string>

namespace minidl {

struct BenchAllreduceOptions {
  std::string device = "auto";  // cpu, cuda or auto
  std::string dist = "auto";    // auto, single, mpi or nccl
  int64_t max_mib = 256;        // the largest message, MiB (1..16384)
  int64_t iters = 20;           // timed calls per size (1..100000)
};

int bench_allreduce(const BenchAllreduceOptions& options);

}  // namespace minidl
