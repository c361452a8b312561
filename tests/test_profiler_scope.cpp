// The profiler's hooks hang on the model it is installed on (Module::set_observer) and on the
// installing thread's backward passes (autograd::BackwardObserverScope), never on the process:
// two profilers on two models in two threads each report their own model only, and a model no
// profiler observes adds no rows to the profile of one that runs beside it.
#include <atomic>
#include <exception>
#include <functional>
#include <memory>
#include <set>
#include <thread>

#include "core/autograd.h"
#include "layers/registry.h"
#include "profiling/profiler.h"
#include "test_util.h"

using namespace minidl;

namespace {

std::shared_ptr<Module> mlp(int64_t width) {
  const nlohmann::json layers = {{{"type", "Linear"}, {"in_features", 4}, {"out_features", width}},
                                 {{"type", "ReLU"}},
                                 {{"type", "Linear"}, {"in_features", width}, {"out_features", 2}}};
  std::shared_ptr<Module> net = build_sequential(layers, "model.layers");
  net->assign_paths();
  return net;
}

// A forward and a backward of `net` on a batch of 3.
void forward_backward(Module& net, uint64_t seed) {
  Tensor x = test::random_tensor({3, 4}, seed);
  Tensor y = net(x);
  autograd::backward(y, Tensor::full(y.shape(), 1.f));
}

std::set<int> module_ids(Module& net) {
  std::set<int> ids;
  for (const auto& [path, m] : net.named_modules()) ids.insert(m->id());
  return ids;
}

std::set<int> module_rows(const ProfileReport& r) {
  std::set<int> ids;
  for (const ProfileRow& row : r.rows)
    if (row.kind == RowKind::Module) ids.insert(row.module_id);
  return ids;
}

// Every module of `net` has its row, called once a step, its Linears' backward seen too.
void require_own_rows(const ProfileReport& r, Module& net) {
  REQUIRE(module_rows(r) == module_ids(net));
  for (const ProfileRow& row : r.rows) {
    if (row.kind != RowKind::Module) continue;
    INFO(row.name);
    REQUIRE(row.fwd_calls == 1);
    if (row.type == "Linear") REQUIRE(row.bwd_calls >= 1);
  }
}

}  // namespace

TEST_CASE("profiler: two profilers on two models in two threads each see their own", "[profiler][observer]") {
  std::shared_ptr<Module> a = mlp(5), b = mlp(7);
  ProfileReport ra, rb;
  std::exception_ptr ea, eb;
  // Both are installed before either steps, and both step before either uninstalls, so a
  // process-wide observer would be shared (or refused) for the whole time.
  std::atomic<int> installed{0}, stepped{0};
  const auto wait_for = [](std::atomic<int>& n) {
    while (n.load() < 2) std::this_thread::yield();
  };
  const auto profile = [&](Module& net, ProfileReport& out, std::exception_ptr& error, uint64_t seed) {
    Profiler p(Device::cpu());
    try {
      p.install(net);
    } catch (...) {
      error = std::current_exception();
    }
    ++installed;
    wait_for(installed);
    try {
      for (int step = 0; step < 10 && !error; ++step) {
        p.begin_step();
        forward_backward(net, seed + step);
        p.end_step();
      }
    } catch (...) {
      error = std::current_exception();
    }
    ++stepped;
    wait_for(stepped);
    p.uninstall();
    if (!error) out = p.report();
  };
  std::thread ta(profile, std::ref(*a), std::ref(ra), std::ref(ea), 1);
  std::thread tb(profile, std::ref(*b), std::ref(rb), std::ref(eb), 100);
  ta.join();
  tb.join();
  if (ea) std::rethrow_exception(ea);
  if (eb) std::rethrow_exception(eb);
  require_own_rows(ra, *a);
  require_own_rows(rb, *b);
  REQUIRE(a->observer() == nullptr);
  REQUIRE(b->observer() == nullptr);
}

TEST_CASE("profiler: a model it does not observe adds no rows, in the same thread and step", "[profiler][observer]") {
  std::shared_ptr<Module> observed = mlp(5), other = mlp(7);
  Profiler p(Device::cpu());
  p.install(*observed);
  REQUIRE(other->observer() == nullptr);
  for (int step = 0; step < 2; ++step) {
    p.begin_step();
    forward_backward(*observed, 1 + step);
    forward_backward(*other, 10 + step);  // its forward unseen; its backward nodes are autograd's
    p.end_step();
  }
  p.uninstall();
  const ProfileReport r = p.report();
  require_own_rows(r, *observed);
  bool autograd_row = false;
  for (const ProfileRow& row : r.rows) autograd_row = autograd_row || row.kind == RowKind::Autograd;
  REQUIRE(autograd_row);
}
