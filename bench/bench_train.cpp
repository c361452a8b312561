#include "bench/bench_train.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include <unistd.h>

#include "train/checkpoint.h"
#include "train/checkpoint_writer.h"
#include "train/run.h"
#include "core/allocator.h"
#include "core/error.h"
#include "distributed/communicator.h"
#include "distributed/launch.h"
#ifdef MINIDL_WITH_CUDA
#include "core/cuda/profiler_events.h"
#endif

namespace minidl {

namespace fs = std::filesystem;

int bench_train(const BenchTrainOptions& options) {
  const int64_t steps = options.steps, warmup = options.warmup;
  MINIDL_CHECK(steps >= 1 && warmup >= 0, "bench train: --steps must be >= 1 and --warmup >= 0");
  // Under a launcher every rank trains its share of each step; rank 0 reports.
  const Launch launch = detect_launch();
  select_local_gpu(launch);
  PreparedConfig prepared = prepare_config(options.config, options.overrides, options.device);
  TrainConfig& config = prepared.config;
  const Device dev = prepared.device;
  auto [train_set, test_set] = load_datasets(config);
  Run run(config, dev, std::move(train_set), std::move(test_set));
  const std::shared_ptr<Communicator> comm = make_communicator(options.dist, launch, dev);
  run.set_communicator(comm);
  Trainer& trainer = run.trainer();
  DataParallel& dp = trainer.data_parallel();
  auto run_steps = [&](int64_t n) {
    for (int64_t s = 0; s < n; ++s) run.step();
  };
  using Clock = std::chrono::steady_clock;
  run_steps(warmup);
  synchronize(dev);
  reset_peak_device_memory();
  const auto t0 = Clock::now();
  run_steps(steps);
  synchronize(dev);
  const double train_s = std::chrono::duration<double>(Clock::now() - t0).count();
  const double wall_ms = 1e3 * train_s / static_cast<double>(steps);
  // The GPU's own time per step: the same number of steps again, queued behind a stall long
  // enough for the host to have launched them all before the GPU gets to them.
  double gpu_ms = 0;
#ifdef MINIDL_WITH_CUDA
  if (dev.is_cuda()) {
    cuda::TimingEvents events;
    cuda::stall_stream(std::max(50.0, 3 * wall_ms * static_cast<double>(steps)));
    events.record(0);
    run_steps(steps);
    events.record(1);
    std::vector<double> ms;
    events.read_ms(2, ms);
    gpu_ms = ms[1] / static_cast<double>(steps);
  }
#endif
  // The ordered reduction of a step of several micro-batches, timed on further steps of its own
  // (the timing waits for the device around it, which the steps above must not pay), then what
  // queueing its buckets during backward saves: three blocks of as many steps back to back, the
  // middle one with the reduction after backward (A B A: a steady drift of the step time over the
  // run, which a later block alone would take for the difference, cancels). Steps that reduce
  // after backward are graphs of their own (Trainer::step_kind): warmed up and captured first.
  DataParallel::ReductionTiming reduction;
  double serial_ms = 0, overlap_ms = wall_ms;
  const int in_backward = dp.gradient_buckets_in_backward();  // of the last timed step
  auto block_ms = [&](int64_t n) {
    synchronize(dev);
    const auto s0 = Clock::now();
    run_steps(n);
    synchronize(dev);
    return 1e3 * std::chrono::duration<double>(Clock::now() - s0).count() / static_cast<double>(n);
  };
  if (dp.micro_batches() > 1) {
    dp.reduction_timing() = DataParallel::ReductionTiming{true};
    run_steps(std::min<int64_t>(steps, 20));
    reduction = dp.reduction_timing();
    dp.reduction_timing().enabled = false;
    if (dp.reduction_overlapped()) {
      dp.set_reduction_overlap(false);
      // Each kind of step needs two eager steps and a capture; lookahead's kinds come every few
      // steps, so 24 steps capture those of any period up to 8 before the timed block.
      if (dev.is_cuda() && config.cuda_graph) run_steps(std::max<int64_t>(warmup, 24));
      dp.set_reduction_overlap(true);
      const double first = block_ms(steps);
      dp.set_reduction_overlap(false);
      serial_ms = block_ms(steps);
      dp.set_reduction_overlap(true);
      overlap_ms = (first + block_ms(steps)) / 2;
    }
  }
  if (comm->rank() != 0) return 0;
  const auto e0 = Clock::now();
  const double acc = trainer.evaluate(TtaMode::None).acc;
  const double eval_s = std::chrono::duration<double>(Clock::now() - e0).count();
  const double train_ips = static_cast<double>(steps * config.batch_size) / train_s;
  // Checkpoints as a run takes them (model, optimizer state, metadata; fsync'ed), into a scratch
  // folder: what the training thread pays (the snapshot into the writer's pinned memory) and what
  // the writer's thread then spends (CRC, file, fsync, rename), against an epoch of these steps.
  // The first snapshot also allocates the pinned buffer, once per run; the second costs what every
  // later one does.
  const fs::path scratch = fs::temp_directory_path() / str("minidl_bench_checkpoint.", ::getpid());
  fs::create_directories(scratch);
  CheckpointInfo info;
  info.step = run.next_step();
  info.config = trainer.resolved_config();
  double first_snapshot_s = 0, snapshot_s = 0, write_s = 0;
  {
    CheckpointWriter checkpoints;
    for (int i = 0; i < 2; ++i) {
      const auto c0 = Clock::now();
      checkpoints.write(scratch.string(), trainer.model(), trainer.optimizer(), info, -1, 1);
      snapshot_s = std::chrono::duration<double>(Clock::now() - c0).count();
      if (i == 0) first_snapshot_s = snapshot_s;
      checkpoints.wait();
      write_s = checkpoints.last_write_seconds();
    }
  }
  const double checkpoint_mb = static_cast<double>(fs::file_size(scratch / "checkpoint.safetensors")) / 1e6;
  fs::remove_all(scratch);
  const double epoch_s = train_s / static_cast<double>(steps) * static_cast<double>(trainer.steps_per_epoch());
  std::printf("bench train: %s on %s, %s %s, batch %lld, training step: %s\n", options.config.c_str(),
              dev.str().c_str(), to_string(*config.precision), to_string(*config.memory_format),
              static_cast<long long>(config.batch_size), trainer.step_mode().c_str());
  std::printf("  training:   %.2f ms/step, %.0f images/s (%lld steps after %lld warm-up)\n", wall_ms, train_ips,
              static_cast<long long>(steps), static_cast<long long>(warmup));
  if (trainer.sample_kind() != SampleKind::Images) {
    const bool tokens = trainer.sample_kind() == SampleKind::Tokens;
    std::printf(
        tokens ? "  tokens:     %.0f tokens/s (windows of %lld)\n" : "  voxels:     %.0f voxels/s (volumes of %lld)\n",
        train_ips * static_cast<double>(trainer.outputs_per_sample()),
        static_cast<long long>(trainer.outputs_per_sample()));
  }
  if (comm->world_size() > 1)
    std::printf("  ranks:      world size %d (%s), %.0f images/s per rank, %.0f in total\n", comm->world_size(),
                comm->backend(), train_ips / comm->world_size(), train_ips);
  if (reduction.steps > 0) {
    const double reduce_ms = 1e3 * reduction.seconds / static_cast<double>(reduction.steps);
    std::printf(
        "  all-reduce: %.3f ms/step (%.1f%% of the step), the ordered reduction of %lld micro-batches of %.2f MB "
        "over %d rank(s) (%s), alone\n",
        reduce_ms, 100.0 * reduce_ms / wall_ms, static_cast<long long>(dp.micro_batches()),
        static_cast<double>(reduction.bytes_per_micro_batch) / 1e6, comm->world_size(), comm->backend());
    const double hidden_ms = serial_ms - overlap_ms;
    if (dp.reduction_overlapped() && dev.is_cuda())
      std::printf(
          "  overlap:    %d gradient bucket(s), %d queued during backward on a side stream: %.2f ms/step, "
          "%.2f ms with the reduction after backward, so backward hides %.3f ms (%.0f%%) of it\n",
          dp.gradient_buckets(), in_backward, overlap_ms, serial_ms, hidden_ms, 100.0 * hidden_ms / reduce_ms);
    else if (dp.reduction_overlapped())
      std::printf(
          "  overlap:    %d gradient bucket(s), %d reduced inside backward once complete: on the CPU that "
          "hides nothing (%.2f ms/step; %.2f ms with the reduction after backward)\n",
          dp.gradient_buckets(), in_backward, overlap_ms, serial_ms);
    else
      std::printf("  overlap:    none: the reduction runs after backward (%s)\n", dp.overlap_off_reason());
  }
  if (gpu_ms > 0)
    std::printf("  GPU time:   %.2f ms/step (steps queued ahead of the GPU); wall / GPU = %.3f\n", gpu_ms,
                wall_ms / gpu_ms);
  const int64_t test_images = trainer.test_size();
  std::printf("  evaluation: %.0f images/s (%lld test images in %.2f s; accuracy %.2f%% after %lld steps)\n",
              static_cast<double>(test_images) / eval_s, static_cast<long long>(test_images), eval_s, acc,
              static_cast<long long>(run.next_step()));
  std::printf("  checkpoint: %.1f MB; the training thread pays %.2f ms for its snapshot (%.2f%% of an epoch of %lld "
              "steps at this speed; the first snapshot, which allocates the pinned buffer, %.2f ms)\n",
              checkpoint_mb, 1e3 * snapshot_s, 100.0 * snapshot_s / epoch_s,
              static_cast<long long>(trainer.steps_per_epoch()), 1e3 * first_snapshot_s);
  if (write_s <= epoch_s)
    std::printf("              the background write (CRC-32, file, fsync, rename) takes %.3f s: it ends within an "
                "epoch (%.3f s), before the next checkpoint at the default cadence\n",
                write_s, epoch_s);
  else
    std::printf("              the background write (CRC-32, file, fsync, rename) takes %.3f s, longer than an "
                "epoch (%.3f s): a checkpoint per epoch waits %.3f s for the one before\n",
                write_s, epoch_s, write_s - epoch_s);
  if (dev.is_cuda())
    std::printf("  peak device memory during training steps: %.2f GB\n", device_memory_stats().peak_bytes / 1e9);
  return 0;
}

}  // namespace minidl
