#include "train/param_rules.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "core/error.h"
#include "train/config.h"
#include "core/init.h"
#include "core/json_args.h"
#include "layers/conv/patch_whitening.h"
#include "optim/param_groups.h"

namespace minidl {

namespace {

// The selector keys every rule shares; errors name the rule's path.
ParamGroup read_selector(JsonArgs& args) {
  ParamGroup g;
  g.match = args.get_string("match", "");
  g.module_type = read_module_type(args);
  MINIDL_CHECK(!g.match.empty() || !g.module_type.empty(), args.where(),
               ": a rule needs \"match\" (a parameter name pattern) and/or \"module_type\"");
  return g;
}

std::vector<const NamedParam*> matching(const ParamGroup& selector, const std::vector<NamedParam>& params,
                                        const std::string& path) {
  std::vector<const NamedParam*> out;
  for (const NamedParam& p : params)
    if (selector.matches(p)) out.push_back(&p);
  MINIDL_CHECK(!out.empty(), path, ": matches no parameter");
  return out;
}

// Calls body(args, selector, where) for each rule object of the list at `path`, in order; the body
// reads the rule's own keys and finishes `args`.
void for_each_rule(const nlohmann::json& rules, const std::string& path,
                   const std::function<void(JsonArgs&, const ParamGroup&, const std::string&)>& body) {
  MINIDL_CHECK(rules.is_array(), path, ": expected a list of rule objects, got ", rules.dump());
  for (size_t r = 0; r < rules.size(); ++r) {
    const std::string where = str(path, "[", r, "]");
    MINIDL_CHECK(rules[r].is_object(), where, ": expected a rule object, got ", rules[r].dump());
    JsonArgs args(rules[r], where);
    const ParamGroup selector = read_selector(args);
    body(args, selector, where);
  }
}

void init_patch_whitening(const NamedParam& p, double eps, int64_t images, const ImageSource& source,
                          const std::string& path) {
  Tensor w = p.tensor;
  MINIDL_CHECK(w.dim() == 4, path, ": patch_whitening needs a conv weight (O, C, kh, kw), '", p.name, "' is ",
               shape_str(w.shape()));
  const int64_t c = w.size(1), kh = w.size(2), kw = w.size(3), d = c * kh * kw;
  MINIDL_CHECK(w.size(0) == 2 * d, path, ": patch_whitening of ", kh, "x", kw, " patches of ", c,
               " channels makes ", 2 * d, " filters (each eigenvector and its negation), but '", p.name, "' has ",
               w.size(0));
  const Tensor x = source(images);
  MINIDL_CHECK(x.dim() == 4 && x.size(1) == c, path, ": the training images ", x.str(), " do not have the ", c,
               " channels '", p.name, "' takes");
  w.copy_(whitening_filters(patch_moments(x, kh, kw), c, kh, kw, eps));
}

}  // namespace

void apply_init_rules(const nlohmann::json& rules, const std::vector<NamedParam>& params, const ImageSource& images,
                      const std::string& path) {
  for_each_rule(rules, path, [&](JsonArgs& args, const ParamGroup& selector, const std::string& where) {
    const std::string type = args.get_string("type", "");
    double eps = 0;
    int64_t count = 0;
    if (type == "patch_whitening") {
      eps = args.get_float("eps", 5e-4);
      count = args.get_int("images", 5000);
      MINIDL_CHECK(eps >= 0, args.key_path("eps"), ": expected >= 0, got ", eps);
      MINIDL_CHECK(count >= 1, args.key_path("images"), ": expected >= 1, got ", count);
    } else {
      MINIDL_CHECK(type == "dirac" || type == "zeros" || type == "ones" || type == "unit_std", args.key_path("type"),
                   ": unknown init \"", type, "\" (expected patch_whitening, dirac, zeros, ones or unit_std)");
    }
    args.finish();
    for (const NamedParam* p : matching(selector, params, where)) {
      Tensor t = p->tensor;
      if (type == "patch_whitening") {
        init_patch_whitening(*p, eps, count, images, where);
      } else if (type == "dirac") {
        MINIDL_CHECK(t.dim() == 4, where, ": dirac needs a conv weight (O, C, kh, kw), '", p->name, "' is ",
                     shape_str(t.shape()));
        init_dirac_(t);
      } else if (type == "zeros" || type == "ones") {
        t.fill_(type == "ones" ? 1.f : 0.f);
      } else {
        init_unit_std_(t);
      }
    }
  });
}

FreezeRules::FreezeRules(const nlohmann::json& rules, const std::vector<NamedParam>& params, int64_t steps_per_epoch,
                         const std::string& path) {
  for_each_rule(rules, path, [&](JsonArgs& args, const ParamGroup& selector, const std::string& where) {
    const double from_epoch = args.get_float("from_epoch", 0.0);
    // Bounded like the epoch count, so the step it becomes fits in int64.
    MINIDL_CHECK(from_epoch >= 0 && from_epoch <= static_cast<double>(kMaxEpochs), args.key_path("from_epoch"),
                 ": expected 0..", kMaxEpochs, ", got ", from_epoch);
    args.finish();
    const auto from_step = static_cast<int64_t>(std::ceil(from_epoch * static_cast<double>(steps_per_epoch)));
    for (const NamedParam* p : matching(selector, params, where)) {
      // A later rule for the same parameter replaces the earlier one (freeze a family, then give
      // one member a later cut-off).
      auto same = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.tensor.same(p->tensor); });
      if (same != entries_.end())
        same->from_step = from_step;
      else
        entries_.push_back({p->tensor, from_step});
    }
  });
}

int FreezeRules::phase(int64_t step) const {
  int frozen = 0;
  for (const Entry& e : entries_) frozen += step >= e.from_step ? 1 : 0;
  return frozen;
}

int64_t FreezeRules::frozen_elements(int64_t step) const {
  int64_t frozen = 0;
  for (const Entry& e : entries_) frozen += step >= e.from_step ? e.tensor.numel() : 0;
  return frozen;
}

void FreezeRules::apply(int64_t step) {
  for (Entry& e : entries_) {
    const bool train = step < e.from_step;
    if (e.tensor.requires_grad() == train) continue;
    e.tensor.set_requires_grad(train);
    if (!train) e.tensor.set_grad(Tensor());
  }
}

}  // namespace minidl
