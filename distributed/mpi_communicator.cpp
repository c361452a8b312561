#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "core/json_limits.h"
#include "distributed/backends.h"

#ifdef MINIDL_HAVE_MPI
#include <mpi.h>
#endif

namespace minidl {

#ifdef MINIDL_HAVE_MPI

void check_mpi(int status, const char* call) {
  if (status == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(status, text, &length);
  fail(str("MPI: ", call, " failed: ", std::string(text, static_cast<size_t>(length))));
}

namespace {

// MPI counts are ints: a larger message is refused rather than truncated.
int mpi_count(size_t bytes, const char* op) {
  MINIDL_CHECK(bytes <= static_cast<size_t>(std::numeric_limits<int>::max()), "MPI ", op, ": ", bytes,
               " bytes is more than one MPI call carries");
  return static_cast<int>(bytes);
}

class MpiWorldImpl final : public MpiWorld {
 public:
  MpiWorldImpl() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    }
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm node;
    check_mpi(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node),
              "MPI_Comm_split_type");
    MPI_Comm_rank(node, &local_rank_);
    MPI_Comm_free(&node);
  }
  ~MpiWorldImpl() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }
  int size() const override { return size_; }
  int rank() const override { return rank_; }
  int local_rank() const override { return local_rank_; }
  void broadcast_bytes(void* data, size_t bytes, int root) override {
    check_mpi(MPI_Bcast(data, mpi_count(bytes, "broadcast"), MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
  }
  void end_job_after_error(const std::string& message) override {
    if (size_ <= 1) return;
    // An error every rank meets (a batch that does not split) is said once: the other ranks give
    // rank 0 a moment to end the job with it; an error of their own is said after that moment.
    if (rank_ != 0) std::this_thread::sleep_for(std::chrono::seconds(2));
    std::fprintf(stderr, "minidl: error: %s\n", text_excerpt(message, 2000).c_str());
    std::fflush(stderr);
    std::fflush(stdout);
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::abort();
  }

 private:
  int size_ = 1, rank_ = 0, local_rank_ = 0;
};

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::Float32: return MPI_FLOAT;
    case DType::Int32: return MPI_INT;
    default: fail(str("MPI all_reduce_sum: float32 or int32 tensors only, got ", dtype_name(t)));
  }
}

// Every collective is nonblocking, completed by the watch's polling (distributed/backends.h): a rank
// that does not arrive ends the job after the timeout instead of leaving the others waiting.
class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(std::shared_ptr<MpiWorld> world, double timeout_s)
      : world_(std::move(world)), watch_(make_collective_watch(world_, timeout_s)) {}
  const char* backend() const override { return "mpi"; }
  int world_size() const override { return world_->size(); }
  int rank() const override { return world_->rank(); }
  int local_rank() const override { return world_->local_rank(); }
  void all_reduce_sum(Tensor& t) override {
    check_host(t, "all_reduce_sum");
    const int n = mpi_count(static_cast<size_t>(t.numel()), "all_reduce_sum");
    watch_->enter("all_reduce_sum");
    MPI_Request request;
    check_mpi(MPI_Iallreduce(MPI_IN_PLACE, t.raw_data(), n, mpi_type(t.dtype()), MPI_SUM, MPI_COMM_WORLD, &request),
              "MPI_Iallreduce");
    complete(request);
  }
  void broadcast(Tensor& t, int root) override {
    check_host(t, "broadcast");
    MINIDL_CHECK(root >= 0 && root < world_size(), "broadcast: root ", root, " is not a rank");
    const int n = mpi_count(t.nbytes(), "broadcast");
    watch_->enter("broadcast");
    MPI_Request request;
    check_mpi(MPI_Ibcast(t.raw_data(), n, MPI_BYTE, root, MPI_COMM_WORLD, &request), "MPI_Ibcast");
    complete(request);
  }
  void all_gather(const Tensor& in, Tensor& out) override {
    check_host(in, "all_gather");
    check_collective(in, out, world_size(), Collective::AllGather);
    const int n = mpi_count(in.nbytes(), "all_gather");
    watch_->enter("all_gather");
    MPI_Request request;
    check_mpi(MPI_Iallgather(in.raw_data(), n, MPI_BYTE, out.raw_data(), n, MPI_BYTE, MPI_COMM_WORLD, &request),
              "MPI_Iallgather");
    complete(request);
  }
  void all_to_all(const Tensor& in, Tensor& out) override {
    check_host(in, "all_to_all");
    check_collective(in, out, world_size(), Collective::AllToAll);
    const int chunk = mpi_count(in.nbytes() / static_cast<size_t>(world_size()), "all_to_all");
    watch_->enter("all_to_all");
    MPI_Request request;
    check_mpi(MPI_Ialltoall(in.raw_data(), chunk, MPI_BYTE, out.raw_data(), chunk, MPI_BYTE, MPI_COMM_WORLD, &request),
              "MPI_Ialltoall");
    complete(request);
  }
  void barrier() override {
    watch_->enter("barrier");
    watch_->barrier();
  }
  void set_timeout_report(TimeoutReport report) override { watch_->set_report(std::move(report)); }
  void end_job_after_error(const std::string& message) override { world_->end_job_after_error(message); }

 private:
  static void check_host(const Tensor& t, const char* op) {
    check_dense(t, op);
    MINIDL_CHECK(!t.is_cuda(), "MPI ", op, ": the MPI backend takes CPU tensors, got ", t.str());
  }
  void complete(MPI_Request& request) {
    watch_->wait([&request] {
      int done = 0;
      check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
      return done != 0;
    });
  }
  std::shared_ptr<MpiWorld> world_;
  std::unique_ptr<CollectiveWatch> watch_;
};

}  // namespace

bool built_with_mpi() { return true; }

std::shared_ptr<MpiWorld> mpi_world() {
  static std::mutex mutex;
  static std::weak_ptr<MpiWorld> current;
  const std::lock_guard<std::mutex> lock(mutex);
  std::shared_ptr<MpiWorld> w = current.lock();
  if (!w) {
    w = std::make_shared<MpiWorldImpl>();
    current = w;
  }
  return w;
}

std::unique_ptr<Communicator> make_mpi_communicator(const Launch& launch, double timeout_s) {
  std::shared_ptr<MpiWorld> world = mpi_world();
  MINIDL_CHECK(world->size() == launch.world_size || launch.world_size <= 1, "MPI: the launcher said ",
               launch.world_size, " ranks (", launch.launcher, ") but MPI_COMM_WORLD has ", world->size());
  return std::make_unique<MpiCommunicator>(std::move(world), timeout_s);
}

#else

bool built_with_mpi() { return false; }

std::shared_ptr<MpiWorld> mpi_world() {
  fail("this minidl was built without MPI (CMake found no MPI; install libopenmpi-dev and rebuild)");
}

std::unique_ptr<Communicator> make_mpi_communicator(const Launch&, double) {
  fail("--dist mpi: this minidl was built without MPI (CMake found no MPI; install libopenmpi-dev and rebuild)");
}

#endif

}  // namespace minidl
