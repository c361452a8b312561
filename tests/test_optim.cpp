// Optimizers: SGD (plain, momentum, Nesterov, weight decay) and AdamW over several steps with a
// changing lr against float64 implementations of the torch.optim formulas; parameter groups and
// their matching rule; parameters without gradients; zero_grad; config round trip and errors;
// state save/load giving a bit-identical next step; GPU updates bit-identical to the CPU (both
// run the same per-element code with every rounding pinned down: exact equality is required);
// a device skip flag (float16 loss scaling) leaving weights, state and step counts as they are.
#include <cmath>
#include <cstring>
#include <map>
#include <vector>

#include "core/error.h"
#include "optim/optimizer.h"
#include "optim/param_groups.h"
#include "test_util.h"

using namespace minidl;
using nlohmann::json;

namespace {

struct Spec {
  const char* name;
  const char* module_type;
  Shape shape;
};

const std::vector<Spec> kSpecs = {{"0.weight", "Conv2d", {4, 3, 3, 3}},
                                  {"1.weight", "BatchNorm2d", {4}},
                                  {"1.bias", "BatchNorm2d", {4}},
                                  {"3.weight", "Linear", {10, 37}},
                                  {"3.bias", "Linear", {10}}};

std::vector<NamedParam> make_params(const std::vector<Spec>& specs, Device device = Device::cpu()) {
  std::vector<NamedParam> out;
  for (size_t i = 0; i < specs.size(); ++i) {
    Tensor t = test::random_tensor(specs[i].shape, 1000 + i, -1.f, 1.f, device);
    t.set_requires_grad(true);
    out.push_back({specs[i].name, t, specs[i].module_type});
  }
  return out;
}

std::vector<float> grad_values(int64_t n, int step, size_t param) {
  return test::random_values(n, 50 + 100 * step + param, -2.f, 2.f);
}

void set_grads(std::vector<NamedParam>& params, int step) {
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor& p = params[i].tensor;
    p.set_grad(Tensor::from_vector(grad_values(p.numel(), step, i), p.shape(), p.device()));
  }
}

double lr_at(int step) { return 0.1 * (1 + 0.5 * step); }

// float64 torch.optim reference state for one parameter.
struct Ref {
  std::vector<double> p, buf, m, v;
  double lr_scale = 1, wd = 0;
  int64_t steps = 0;
};

std::vector<Ref> reference_init(const std::vector<NamedParam>& params) {
  std::vector<Ref> refs;
  for (const NamedParam& np : params) {
    Ref r;
    for (float x : np.tensor.to_vector()) r.p.push_back(x);
    r.buf.assign(r.p.size(), 0);
    r.m.assign(r.p.size(), 0);
    r.v.assign(r.p.size(), 0);
    refs.push_back(r);
  }
  return refs;
}

void reference_sgd(Ref& r, const std::vector<float>& grad, double lr, double momentum, bool nesterov) {
  for (size_t i = 0; i < r.p.size(); ++i) {
    double g = grad[i] + r.wd * r.p[i];
    if (momentum != 0) {
      r.buf[i] = r.steps == 0 ? g : momentum * r.buf[i] + g;
      g = nesterov ? g + momentum * r.buf[i] : r.buf[i];
    }
    r.p[i] -= lr * r.lr_scale * g;
  }
  ++r.steps;
}

void reference_adamw(Ref& r, const std::vector<float>& grad, double lr, double b1, double b2, double eps) {
  ++r.steps;
  const double glr = lr * r.lr_scale;
  const double bc1 = 1 - std::pow(b1, r.steps), bc2 = 1 - std::pow(b2, r.steps);
  for (size_t i = 0; i < r.p.size(); ++i) {
    r.p[i] *= 1 - glr * r.wd;
    r.m[i] = b1 * r.m[i] + (1 - b1) * grad[i];
    r.v[i] = b2 * r.v[i] + (1 - b2) * grad[i] * grad[i];
    r.p[i] -= glr / bc1 * r.m[i] / (std::sqrt(r.v[i]) / std::sqrt(bc2) + eps);
  }
}

void require_params_close(const std::vector<NamedParam>& params, const std::vector<Ref>& refs, double rtol,
                          const std::string& what) {
  for (size_t i = 0; i < params.size(); ++i)
    test::require_close(params[i].tensor.to_vector(), refs[i].p, rtol, 1e-6, what + " " + params[i].name);
}

std::vector<float> all_values(const std::vector<NamedParam>& params) {
  std::vector<float> out;
  for (const NamedParam& p : params) {
    std::vector<float> v = p.tensor.to_vector();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("SGD matches the torch.optim.SGD formulas over several steps", "[optim]") {
  struct Case {
    double momentum, wd;
    bool nesterov;
  };
  for (Case c : {Case{0, 0, false}, Case{0, 5e-2, false}, Case{0.9, 0, false}, Case{0.9, 5e-2, false},
                 Case{0.9, 5e-2, true}, Case{0.5, 0, true}}) {
    std::vector<NamedParam> params = make_params(kSpecs);
    std::vector<Ref> refs = reference_init(params);
    for (Ref& r : refs) r.wd = c.wd;
    auto opt = make_optimizer({{"type", "SGD"}, {"lr", 0.1}, {"momentum", c.momentum},
                               {"nesterov", c.nesterov}, {"weight_decay", c.wd}},
                              params, "optimizer");
    REQUIRE(opt->base_lr() == 0.1);
    for (int step = 0; step < 5; ++step) {
      set_grads(params, step);
      opt->step(lr_at(step));
      for (size_t i = 0; i < refs.size(); ++i)
        reference_sgd(refs[i], grad_values(params[i].tensor.numel(), step, i), lr_at(step), c.momentum,
                      c.nesterov);
    }
    require_params_close(params, refs, 1e-5,
                         str("momentum ", c.momentum, " wd ", c.wd, " nesterov ", c.nesterov));
  }
}

TEST_CASE("AdamW matches the torch.optim.AdamW formulas over several steps", "[optim]") {
  for (double wd : {0.0, 0.1}) {
    std::vector<NamedParam> params = make_params(kSpecs);
    std::vector<Ref> refs = reference_init(params);
    for (Ref& r : refs) r.wd = wd;
    auto opt = make_optimizer(
        {{"type", "AdamW"}, {"lr", 0.01}, {"betas", {0.8, 0.95}}, {"eps", 1e-6}, {"weight_decay", wd}}, params,
        "optimizer");
    for (int step = 0; step < 6; ++step) {
      set_grads(params, step);
      opt->step(lr_at(step) * 0.1);
      for (size_t i = 0; i < refs.size(); ++i)
        reference_adamw(refs[i], grad_values(params[i].tensor.numel(), step, i), lr_at(step) * 0.1, 0.8,
                        0.95, 1e-6);
    }
    require_params_close(params, refs, 1e-5, str("AdamW wd ", wd));
  }
}

TEST_CASE("parameter group patterns: dotted suffixes and globs", "[optim]") {
  REQUIRE(param_name_matches("bias", "bias"));
  REQUIRE(param_name_matches("bias", "0.bias"));
  REQUIRE(param_name_matches("bias", "2.1.bias"));
  REQUIRE(!param_name_matches("bias", "0.unbias"));
  REQUIRE(!param_name_matches("bias", "bias.0"));
  REQUIRE(param_name_matches("body.0.weight", "2.body.0.weight"));
  REQUIRE(param_name_matches("*.weight", "layer1.0.weight"));
  REQUIRE(!param_name_matches("*.weight", "weight"));
  REQUIRE(param_name_matches("0.*", "0.weight"));
  REQUIRE(!param_name_matches("0.*", "10.weight"));
  REQUIRE(param_name_matches("?.weight", "3.weight"));
  REQUIRE(!param_name_matches("?.weight", "13.weight"));
  REQUIRE(param_name_matches("a*b*c", "aXbYbc"));
  REQUIRE(!param_name_matches("a*b*c", "aXbYb"));
  REQUIRE(param_name_matches("*", "anything.at.all"));
}

TEST_CASE("parameter groups: first match wins, lr_scale and weight_decay per group", "[optim]") {
  std::vector<NamedParam> params = make_params(kSpecs);
  std::vector<Ref> refs = reference_init(params);
  // 1.bias: BatchNorm2d bias group (64x lr, no decay). 0.weight: "0.*" (half lr, decay 0.2).
  // 1.weight, 3.weight, 3.bias: the optimizer's own settings (decay 0.05).
  const json config = json::parse(R"({"type": "SGD", "lr": 0.1, "momentum": 0.9, "nesterov": true,
      "weight_decay": 0.05, "groups": [
        {"module_type": "BatchNorm2d", "match": "bias", "lr_scale": 64, "weight_decay": 0},
        {"match": "0.*", "lr_scale": 0.5, "weight_decay": 0.2},
        {"match": "*bias", "lr_scale": 3}]})");
  const std::map<std::string, std::pair<double, double>> expect = {
      {"0.weight", {0.5, 0.2}}, {"1.weight", {1, 0.05}}, {"1.bias", {64, 0}},
      {"3.weight", {1, 0.05}}, {"3.bias", {3, 0.05}}};
  for (size_t i = 0; i < params.size(); ++i) {
    refs[i].lr_scale = expect.at(params[i].name).first;
    refs[i].wd = expect.at(params[i].name).second;
  }
  auto opt = make_optimizer(config, params, "optimizer");
  for (int step = 0; step < 3; ++step) {
    set_grads(params, step);
    opt->step(lr_at(step) * 0.01);
    for (size_t i = 0; i < refs.size(); ++i)
      reference_sgd(refs[i], grad_values(params[i].tensor.numel(), step, i), lr_at(step) * 0.01, 0.9, true);
  }
  require_params_close(params, refs, 1e-5, "groups");
  REQUIRE(opt->to_json().at("groups").size() == 3);
}

TEST_CASE("a parameter group's own schedule replaces the run's for its parameters", "[optim][schedule]") {
  std::vector<NamedParam> params = make_params(kSpecs);
  std::vector<Ref> refs = reference_init(params);
  // 0.weight: its own decay over 3 steps at 0.5x the lr, then 0 (frozen in place); the others
  // follow the lr the caller passes (the run's schedule).
  const json config = json::parse(R"({"type": "SGD", "lr": 0.1, "momentum": 0.9, "weight_decay": 0.05, "groups": [
        {"match": "0.weight", "lr_scale": 0.5, "schedule": {"type": "piecewise_linear", "steps": [0, 3],
                                                            "factors": [1, 0]}}]})");
  for (size_t i = 0; i < params.size(); ++i) {
    refs[i].lr_scale = params[i].name == "0.weight" ? 0.5 : 1;
    refs[i].wd = 0.05;
  }
  auto opt = make_optimizer(config, params, "optimizer");
  std::vector<float> frozen;
  for (int step = 0; step < 5; ++step) {
    set_grads(params, step);
    const double run_lr = lr_at(step) * 0.01;
    opt->set_position({step, 2, 5});
    opt->step(run_lr);
    for (size_t i = 0; i < refs.size(); ++i) {
      const bool own = params[i].name == "0.weight";
      // 0.1 * (1 - step / 3) before scaling by lr_scale: the group ignores the run's lr.
      const double lr = own ? 0.1 * std::max(0.0, 1 - step / 3.0) : run_lr;
      reference_sgd(refs[i], grad_values(params[i].tensor.numel(), step, i), lr, 0.9, false);
    }
    if (step == 3) frozen = params[0].tensor.to_vector();
  }
  require_params_close(params, refs, 1e-5, "group schedule");
  REQUIRE(params[0].tensor.to_vector() == frozen);  // lr 0 from step 3 on: not one bit moves
  REQUIRE(opt->to_json()["groups"][0]["schedule"]["steps"] == json::parse("[0, 3]"));
  REQUIRE(make_optimizer(opt->to_json(), make_params(kSpecs), "optimizer")->to_json() == opt->to_json());
  // The schedule needs the run's position, and its mistakes are named by key path.
  auto unplaced = make_optimizer(config, make_params(kSpecs), "optimizer");
  REQUIRE_THROWS_WITH(unplaced->step(0.1), Catch::Contains("schedule") && Catch::Contains("set_position"));
  json bad = config;
  bad["groups"][0]["schedule"]["type"] = "linear";
  REQUIRE_THROWS_WITH(make_optimizer(bad, make_params(kSpecs), "optimizer"),
                      Catch::Contains("optimizer.groups[0].schedule.type"));
}

TEST_CASE("parameters without a gradient are left alone, zero_grad keeps the buffers", "[optim]") {
  std::vector<NamedParam> params = make_params(kSpecs);
  auto opt = make_optimizer({{"type", "SGD"}, {"lr", 0.1}, {"momentum", 0.9}, {"weight_decay", 0.1}}, params,
                            "optimizer");
  const std::vector<float> before = params[2].tensor.to_vector();
  set_grads(params, 0);
  params[2].tensor.set_grad(Tensor());
  opt->step(0.1);
  REQUIRE(params[2].tensor.to_vector() == before);
  REQUIRE(params[0].tensor.to_vector() != make_params(kSpecs)[0].tensor.to_vector());
  const json steps = opt->state_scalars().at("steps");
  REQUIRE(steps.at("1.bias") == 0);
  REQUIRE(steps.at("1.weight") == 1);

  const float* storage = params[0].tensor.grad().data<float>();
  opt->zero_grad();
  REQUIRE(params[0].tensor.grad().data<float>() == storage);
  REQUIRE(params[0].tensor.grad().to_vector() == std::vector<float>(108, 0.f));
  REQUIRE(!params[2].tensor.grad().defined());
}

TEST_CASE("optimizer configs print back and reject mistakes by key path", "[optim][config]") {
  const std::vector<NamedParam> params = make_params(kSpecs);
  for (const char* text :
       {R"({"type": "SGD", "lr": 0.4, "momentum": 0.9, "nesterov": true, "weight_decay": 5e-4,
            "groups": [{"module_type": "BatchNorm2d", "lr_scale": 64, "weight_decay": 0}]})",
        R"({"type": "AdamW", "lr": 0.003, "betas": [0.9, 0.99], "eps": 1e-7, "weight_decay": 0.05})",
        R"({"type": "SGD"})"}) {
    auto opt = make_optimizer(json::parse(text), params, "optimizer");
    REQUIRE(make_optimizer(opt->to_json(), params, "optimizer")->to_json() == opt->to_json());
  }
  auto fails = [&](const char* text) { (void)make_optimizer(json::parse(text), params, "optimizer"); };
  REQUIRE_THROWS_WITH(fails(R"({"type": "SGD", "lr": 0.1, "momentun": 0.9})"),
                      Catch::Contains("optimizer.momentun"));
  REQUIRE_THROWS_WITH(fails(R"({"type": "Adam", "lr": 0.1})"),
                      Catch::Contains("optimizer.type") && Catch::Contains("AdamW"));
  REQUIRE_THROWS_WITH(fails(R"({"lr": 0.1})"), Catch::Contains("optimizer.type"));
  REQUIRE_THROWS_WITH(fails(R"({"type": "SGD", "lr": 0.1, "nesterov": true})"),
                      Catch::Contains("optimizer.nesterov") && Catch::Contains("momentum > 0"));
  REQUIRE_THROWS_WITH(fails(R"({"type": "AdamW", "betas": [0.9]})"), Catch::Contains("optimizer.betas"));
  REQUIRE_THROWS_WITH(fails(R"({"type": "SGD", "groups": [{"match": "bias", "lr_scal": 2}]})"),
                      Catch::Contains("optimizer.groups[0].lr_scal"));
  REQUIRE_THROWS_WITH(fails(R"({"type": "SGD", "groups": [{"lr_scale": 2}]})"),
                      Catch::Contains("optimizer.groups[0]") && Catch::Contains("module_type"));
  REQUIRE_THROWS_WITH(fails(R"({"type": "SGD", "groups": [{"match": "bias"}, {"module_type": "Batchnorm2d"}]})"),
                      Catch::Contains("optimizer.groups[1].module_type: unknown layer type 'Batchnorm2d'") &&
                          Catch::Contains("BatchNorm2d"));
  REQUIRE_THROWS_WITH(fails(R"({"type": "SGD", "groups": [{"module_type": "LayerNorm"}]})"),
                      Catch::Contains("optimizer.groups[0]") && Catch::Contains("matches no parameter"));
}

TEST_CASE("optimizer state round trip gives a bit-identical next step", "[optim]") {
  for (const char* text : {R"({"type": "SGD", "lr": 0.1, "momentum": 0.9, "nesterov": true, "weight_decay": 0.01})",
                           R"({"type": "AdamW", "lr": 0.01, "weight_decay": 0.1})"}) {
    INFO(text);
    const json config = json::parse(text);
    std::vector<NamedParam> a = make_params(kSpecs);
    auto opt_a = make_optimizer(config, a, "optimizer");
    for (int step = 0; step < 3; ++step) {
      set_grads(a, step);
      opt_a->step(lr_at(step));
    }
    // Save (copies, as a checkpoint would) and restore into a fresh optimizer over copied weights.
    std::vector<std::pair<std::string, Tensor>> saved;
    for (auto& [name, t] : opt_a->state_tensors()) saved.emplace_back(name, t.clone());
    const json scalars = json::parse(opt_a->state_scalars().dump());
    std::vector<NamedParam> b = make_params(kSpecs);
    for (size_t i = 0; i < b.size(); ++i) b[i].tensor.copy_(a[i].tensor);
    auto opt_b = make_optimizer(config, b, "optimizer");
    opt_b->load_state(saved, scalars);

    set_grads(a, 3);
    set_grads(b, 3);
    opt_a->step(lr_at(3));
    opt_b->step(lr_at(3));
    REQUIRE(same_bits(all_values(a), all_values(b)));
    REQUIRE(opt_a->state_scalars() == opt_b->state_scalars());

    // Mismatches are refused and leave the state untouched.
    std::vector<std::pair<std::string, Tensor>> missing(saved.begin(), saved.end() - 1);
    REQUIRE_THROWS_WITH(opt_b->load_state(missing, scalars), Catch::Contains("tensors, expected"));
    std::vector<std::pair<std::string, Tensor>> reshaped = saved;
    reshaped[0].second = Tensor::zeros({3});
    REQUIRE_THROWS_WITH(opt_b->load_state(reshaped, scalars), Catch::Contains(saved[0].first));
    std::vector<std::pair<std::string, Tensor>> renamed = saved;
    renamed[0].first += "x";
    REQUIRE_THROWS_WITH(opt_b->load_state(renamed, scalars), Catch::Contains(renamed[0].first));
    json wrong_type = scalars;
    wrong_type["type"] = "Lion";
    REQUIRE_THROWS_WITH(opt_b->load_state(saved, wrong_type), Catch::Contains("not"));
  }
}

TEST_CASE("state tensors are named <slot>.<parameter>, to() needs the parameters there", "[optim]") {
  std::vector<NamedParam> params = make_params(kSpecs);
  auto sgd = make_optimizer({{"type", "SGD"}, {"lr", 0.1}, {"momentum", 0.9}}, params, "optimizer");
  REQUIRE(sgd->state_tensors().size() == kSpecs.size());
  REQUIRE(sgd->state_tensors()[0].first == "momentum_buffer.0.weight");
  REQUIRE(make_optimizer({{"type", "SGD"}, {"lr", 0.1}}, params, "optimizer")->state_tensors().empty());
  auto adamw = make_optimizer({{"type", "AdamW"}}, params, "optimizer");
  REQUIRE(adamw->state_tensors().size() == 2 * kSpecs.size());
  REQUIRE(adamw->state_tensors()[kSpecs.size()].first == "exp_avg_sq.0.weight");
  adamw->to(Device::cpu());
  REQUIRE_THROWS_WITH(adamw->to(Device::cuda()), Catch::Contains("parameter '0.weight' is on cpu") &&
                                                     Catch::Contains("move the model first"));
}

TEST_CASE("optimizer updates on the GPU are bit-identical to the CPU", "[optim][cuda]") {
  MINIDL_REQUIRE_CUDA();
  // More tensors than one launch takes (64), of ragged sizes, so the multi-tensor chunking, the
  // grid-stride loops and the rotated block starts are all exercised.
  std::vector<Spec> specs;
  std::vector<std::string> names;
  for (int i = 0; i < 75; ++i) names.push_back(std::to_string(i) + (i % 3 == 0 ? ".bias" : ".weight"));
  const int64_t sizes[] = {1, 3, 64, 1000, 4097, 100003, 7};
  for (int i = 0; i < 75; ++i)
    specs.push_back({names[i].c_str(), i % 5 == 0 ? "BatchNorm2d" : "Conv2d", {sizes[i % 7]}});
  specs.push_back({"big.weight", "Linear", {512, 4609}});  // 2.4M: spans the whole grid
  for (const char* text :
       {R"({"type": "SGD", "lr": 0.1, "momentum": 0.9, "nesterov": true, "weight_decay": 5e-4,
            "groups": [{"module_type": "BatchNorm2d", "lr_scale": 64, "weight_decay": 0}]})",
        R"({"type": "SGD", "lr": 0.1, "momentum": 0.9, "weight_decay": 5e-4})",
        R"({"type": "AdamW", "lr": 0.01, "weight_decay": 0.1,
            "groups": [{"match": "bias", "lr_scale": 2}]})"}) {
    INFO(text);
    const json config = json::parse(text);
    std::vector<NamedParam> cpu = make_params(specs), gpu = make_params(specs, Device::cuda());
    auto opt_cpu = make_optimizer(config, cpu, "optimizer");
    auto opt_gpu = make_optimizer(config, gpu, "optimizer");
    for (int step = 0; step < 4; ++step) {
      set_grads(cpu, step);
      set_grads(gpu, step);
      opt_cpu->step(lr_at(step));
      opt_gpu->step(lr_at(step));
      INFO("step " << step);
      REQUIRE(same_bits(all_values(gpu), all_values(cpu)));
    }
    for (size_t k = 0; k < opt_cpu->state_tensors().size(); ++k)
      REQUIRE(same_bits(opt_gpu->state_tensors()[k].second.to_vector(),
                        opt_cpu->state_tensors()[k].second.to_vector()));
  }
}

namespace {

void set_flag(Tensor& flag, float value) { flag.copy_(Tensor::full({1}, value, Device::cpu())); }

// One optimizer under a skip flag against one that only sees the steps taken, from the same
// weights, on `device`: a flagged step changes nothing (weights, state, step counts), a clean one
// gives the unflagged optimizer's bits, and the flagged state round-trips through a checkpoint.
void check_skip_flag(const char* text, Device device) {
  INFO(text << " on " << device.str());
  const json config = json::parse(text);
  std::vector<NamedParam> plain = make_params(kSpecs, device), flagged = make_params(kSpecs, device);
  auto opt_plain = make_optimizer(config, plain, "optimizer");
  auto opt_flagged = make_optimizer(config, flagged, "optimizer");
  Tensor flag = Tensor::zeros({1}, DType::Float32, device);
  opt_flagged->set_skip_flag(flag.data<float>());
  for (int step = 0; step < 6; ++step) {
    INFO("step " << step);
    const bool skipped = step == 1 || step == 4;
    set_flag(flag, skipped ? 1.f : 0.f);
    set_grads(flagged, step);
    if (step == 3) flagged[2].tensor.set_grad(Tensor());  // a parameter without a gradient: not counted
    const std::vector<float> before = all_values(flagged);
    opt_flagged->step(lr_at(step));
    if (skipped) {
      REQUIRE(same_bits(all_values(flagged), before));
    } else {
      set_grads(plain, step);
      if (step == 3) plain[2].tensor.set_grad(Tensor());
      opt_plain->step(lr_at(step));
      REQUIRE(same_bits(all_values(flagged), all_values(plain)));
    }
    REQUIRE(opt_flagged->state_scalars() == opt_plain->state_scalars());
    for (size_t k = 0; k < opt_plain->state_tensors().size(); ++k)
      REQUIRE(same_bits(opt_flagged->state_tensors()[k].second.to_vector(),
                        opt_plain->state_tensors()[k].second.to_vector()));
  }
  // Setting the flag again (as after a to()) keeps the device counts.
  opt_flagged->set_skip_flag(flag.data<float>());
  REQUIRE(opt_flagged->state_scalars() == opt_plain->state_scalars());
  // The device counts come back from a checkpoint of the unflagged optimizer.
  std::vector<NamedParam> resumed = make_params(kSpecs, device);
  for (size_t i = 0; i < resumed.size(); ++i) resumed[i].tensor.copy_(plain[i].tensor);
  auto opt_resumed = make_optimizer(config, resumed, "optimizer");
  opt_resumed->set_skip_flag(flag.data<float>());
  opt_resumed->load_state(opt_plain->state_tensors(), json::parse(opt_plain->state_scalars().dump()));
  set_flag(flag, 0.f);
  set_grads(plain, 6);
  set_grads(resumed, 6);
  opt_plain->step(lr_at(6));
  opt_resumed->step(lr_at(6));
  REQUIRE(same_bits(all_values(resumed), all_values(plain)));
  REQUIRE(opt_resumed->state_scalars() == opt_plain->state_scalars());
}

}  // namespace

TEST_CASE("a skip flag skips the update on the device and keeps the step counts of the steps taken", "[optim]") {
  std::vector<Device> devices{Device::cpu()};
  if (cuda_available()) devices.push_back(Device::cuda());
  for (Device device : devices)
    for (const char* text :
         {R"({"type": "SGD", "lr": 0.1, "momentum": 0.9, "nesterov": true, "weight_decay": 0.01})",
          R"({"type": "AdamW", "lr": 0.01, "weight_decay": 0.1, "groups": [{"match": "bias", "lr_scale": 2}]})",
          R"({"type": "Muon", "lr": 0.05, "momentum": 0.6, "nesterov": true, "normalize_weights": true,
              "rest": {"type": "AdamW", "lr": 0.01}})"})
      check_skip_flag(text, device);
}
