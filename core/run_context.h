// The settings one run computes with, in one place the run owns: the compute switches ops read,
// and the seed and count of weight initialization (dropout's seed and step are the model's own).
// A Trainer fills a RunContext from its config and makes it current (RunContextScope) in every
// call that builds or runs anything, so two runs in one process (the benchmark's seeds, the
// tests) never see each other's settings, even used alternately.
//
// The current context is per thread: two runs on two threads at once each compute with their
// own. Nothing an op's OpenMP workers run reads it (the ops read their switches on the calling
// thread, before a parallel loop). Outside any scope the thread's default context is current:
// what tests, benchmarks and the commands set with set_compute_settings() and friends.
#pragma once
#include <cstdint>

#include "core/settings.h"

namespace minidl {

struct RunContext {
  ComputeSettings compute;
  // Weight initialization (core/init.h): the seed, and how many tensors have drawn from it.
  uint64_t init_seed = 0;
  uint64_t init_ordinal = 0;
};

// The context installed by the innermost live scope, or the default one.
RunContext& current_run_context();

// Makes `context` current for the scope's lifetime and the previous one current again when it
// ends; scopes nest (strictly: the last one made ends first). The context must outlive the scope.
class RunContextScope {
 public:
  explicit RunContextScope(RunContext& context);
  ~RunContextScope();
  RunContextScope(const RunContextScope&) = delete;
  RunContextScope& operator=(const RunContextScope&) = delete;

 private:
  RunContext* previous_;
};

}  // namespace minidl
