#include "distributed/communicator.h"

#include "core/allocator.h"
#include "core/error.h"
#include "core/json_limits.h"
#include "distributed/backends.h"

namespace minidl {

namespace {

class SingleProcessCommunicator final : public Communicator {
 public:
  const char* backend() const override { return "single"; }
  int world_size() const override { return 1; }
  int rank() const override { return 0; }
  int local_rank() const override { return 0; }
  void all_reduce_sum(Tensor& t) override { check_dense(t, "all_reduce_sum"); }
  void broadcast(Tensor& t, int root) override {
    check_dense(t, "broadcast");
    MINIDL_CHECK(root == 0, "broadcast: root ", root, " is not a rank of a world of 1");
  }
  void all_gather(const Tensor& in, Tensor& out) override {
    check_collective(in, out, 1, Collective::AllGather);
    copy_bytes_async(out.raw_data(), out.device(), in.raw_data(), in.device(), in.nbytes());
  }
  void all_to_all(const Tensor& in, Tensor& out) override {
    check_collective(in, out, 1, Collective::AllToAll);
    copy_bytes_async(out.raw_data(), out.device(), in.raw_data(), in.device(), in.nbytes());
  }
  void barrier() override {}
};

}  // namespace

void check_dense(const Tensor& t, const char* op) {
  MINIDL_CHECK(t.defined() && (t.is_contiguous() || t.is_channels_last()), op, ": expected a dense tensor, got ",
               t.defined() ? t.str() : std::string("none"));
}

void check_collective(const Tensor& in, const Tensor& out, int world, Collective kind) {
  const bool gather = kind == Collective::AllGather;
  const char* op = gather ? "all_gather" : "all_to_all";
  check_dense(in, op);
  check_dense(out, op);
  MINIDL_CHECK(in.dtype() == out.dtype() && in.device() == out.device(), op, ": in ", in.str(), " and out ",
               out.str(), " differ in dtype or device");
  const size_t want = gather ? in.nbytes() * static_cast<size_t>(world) : in.nbytes();
  MINIDL_CHECK(out.nbytes() == want && (gather || in.nbytes() % static_cast<size_t>(world) == 0), op, ": in ",
               in.str(), " and out ", out.str(), " do not fit a world of ", world);
}

std::unique_ptr<Communicator> make_single_process_communicator() {
  return std::make_unique<SingleProcessCommunicator>();
}

std::unique_ptr<Communicator> make_communicator(const std::string& backend, const Launch& launch, Device device,
                                                double timeout_s) {
  MINIDL_CHECK(backend == "auto" || backend == "single" || backend == "mpi" || backend == "nccl",
               "--dist: expected auto, single, mpi or nccl, got '", text_excerpt(backend), "'");
  // A week at most: the deadline is a steady_clock time point, and no collective waits that long.
  MINIDL_CHECK(timeout_s > 0 && timeout_s <= 7 * 24 * 3600, "--dist-timeout: expected seconds in (0, 604800], got ",
               timeout_s);
  std::string chosen = backend;
  if (chosen == "auto") chosen = launch.world_size <= 1 ? "single" : device.is_cuda() ? "nccl" : "mpi";
  if (launch.world_size > 1) {
    MINIDL_CHECK(chosen != "single", "--dist single: this process is one of ", launch.world_size,
                 " ranks started by a launcher (", launch.launcher, "); a single-process run cannot join them");
    MINIDL_CHECK(built_with_mpi(), "this process is rank ", launch.rank, " of ", launch.world_size,
                 " started by a launcher (", launch.launcher, "), but this minidl was built without MPI, so it "
                 "cannot train distributed; install libopenmpi-dev (scripts/setup.sh) and rebuild, or run "
                 "without mpirun");
  }
  if (chosen == "single") return make_single_process_communicator();
  if (chosen == "mpi") {
    MINIDL_CHECK(!device.is_cuda(), "--dist mpi: the MPI backend reduces CPU tensors; a ", device.str(),
                 " run uses --dist nccl (or auto)");
    return make_mpi_communicator(launch, timeout_s);
  }
  MINIDL_CHECK(device.is_cuda(), "--dist nccl: NCCL reduces CUDA tensors; this run is on ", device.str(),
               " (use --dist mpi, or auto)");
  return make_nccl_communicator(launch, timeout_s);
}

}  // namespace minidl
