// The ranks of a data-parallel run and the collectives between them. One process per device;
// every rank runs the same steps and calls the same collectives in the same order. Backends:
//   single  world size 1, no MPI needed (a plain `minidl train`, gradient accumulation);
//   mpi     CPU tensors over MPI (the ranks mpirun or srun started);
//   nccl    CUDA tensors over NCCL on minidl's stream; its unique id is broadcast over MPI, so a
//           world of one runs without any launcher.
// Tensors are dense (contiguous or channels-last) and the same shape and dtype on every rank.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/device.h"
#include "core/tensor.h"
#include "distributed/launch.h"

namespace minidl {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual const char* backend() const = 0;
  virtual int world_size() const = 0;
  virtual int rank() const = 0;
  virtual int local_rank() const = 0;
  // In place: the sum over the ranks of a float32, float64 or int32 tensor. The engine picks the
  // order of the sum, so its bits may change with the world size (ordered_sum in
  // distributed/ordered_reduce.h does not).
  virtual void all_reduce_sum(Tensor& t) = 0;
  // In place: `root`'s values on every rank.
  virtual void broadcast(Tensor& t, int root) = 0;
  // out (world_size * in's bytes): every rank's `in`, in rank order.
  virtual void all_gather(const Tensor& in, Tensor& out) = 0;
  // in and out hold world_size equal chunks: chunk j of `in` goes to rank j, chunk i of `out`
  // came from rank i.
  virtual void all_to_all(const Tensor& in, Tensor& out) = 0;
  virtual void barrier() = 0;
  // Before a CUDA graph that holds collectives is captured or replayed: a replay's collectives
  // pass no host code, so the collective watch (docs/distributed.md, "Faults") sees the whole
  // replay as one collective named `what`, entered here. Nothing on backends without a watch.
  virtual void enter_graph(const char* what) { (void)what; }
  // Asked only when a collective times out, just before this rank ends the job (a world of one
  // never times out): `where` the run is, for the message ("at step 12; the last checkpoint, step
  // 10, is intact"), and `record` keeps the message (the run's log.txt).
  struct TimeoutReport {
    std::function<std::string()> where;
    std::function<void(const std::string& message)> record;
  };
  virtual void set_timeout_report(TimeoutReport report) { (void)report; }
  // This rank failed with an error (`message`) that the others may not share (rank 0 alone writes
  // the run folder; a data folder may be missing on one node). In a world of several ranks, prints
  // "minidl: error: <message>" and ends the whole job (MPI_Abort; a rank other than 0 first waits
  // 2 s, so that an error every rank meets is printed once, by rank 0), so the other ranks
  // neither wait in a collective for this one until the timeout nor name it as hung; its own
  // teardown (a collective) is never reached. In a world of one, returns: the error goes on as
  // any other.
  virtual void end_job_after_error(const std::string& message) { (void)message; }
};

// How long a rank waits in a collective for the others before it ends the job naming the rank
// that did not arrive (docs/distributed.md, "Faults"); PyTorch's NCCL default.
constexpr double kDefaultDistTimeoutSeconds = 600;

// The communicator a run asks for: `backend` is "auto" (nccl on a GPU and mpi on the CPU when
// started by a launcher with more than one rank, single otherwise), "single", "mpi" or "nccl".
// Errors name what is missing: a build without MPI or NCCL, a launcher whose ranks this backend
// cannot serve, a device the backend does not work on. `timeout_s` bounds every collective's wait
// at world size > 1.
std::unique_ptr<Communicator> make_communicator(const std::string& backend, const Launch& launch, Device device,
                                                double timeout_s = kDefaultDistTimeoutSeconds);

// The world of one process.
std::unique_ptr<Communicator> make_single_process_communicator();

// Whether this minidl was built with the MPI and NCCL backends.
bool built_with_mpi();
bool built_with_nccl();
// The NCCL and MPI libraries this binary runs with ("NCCL 2.19.3, Open MPI v4.1.6"), or that a
// backend was not built.
std::string communicator_versions();

}  // namespace minidl
