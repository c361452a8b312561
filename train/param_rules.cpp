#include "train/param_rules.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "core/error.h"
#include "core/field_kinds.h"
#include "core/init.h"
#include "core/json_args.h"
#include "layers/conv/patch_whitening.h"
#include "optim/param_groups.h"
#include "train/config.h"

namespace minidl {

namespace {

// The selector keys every rule shares (a parameter group's, optim/param_groups.h).
template <typename R>
std::vector<Field<R>> selector_rows() {
  return {written_when_set(text("match", &R::match, "", "a name pattern",
                                "the parameter names it selects: a dotted suffix (\"bias\"), or a glob with * and "
                                "? over the whole name")),
          module_type_field(&R::module_type, "the type of the module owning the parameter")};
}

template <typename R>
void check_selector(const R& r, const JsonArgs& args) {
  MINIDL_CHECK(!r.match.empty() || !r.module_type.empty(), args.where(),
               ": a rule needs \"match\" (a parameter name pattern) and/or \"module_type\"");
}

template <typename R>
ParamGroup selector_of(const R& r) {
  ParamGroup g;
  g.match = r.match;
  g.module_type = r.module_type;
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

// Calls body(rule, where) for each rule object of the list at `path`, in order.
template <typename R>
void for_each_rule(const nlohmann::json& rules, const std::string& path,
                   const std::function<void(const R&, const std::string&)>& body) {
  MINIDL_CHECK(rules.is_array(), path, ": expected a list of rule objects, got ", rules.dump());
  for (size_t r = 0; r < rules.size(); ++r) {
    const std::string where = str(path, "[", r, "]");
    MINIDL_CHECK(rules[r].is_object(), where, ": expected a rule object, got ", rules[r].dump());
    JsonArgs args(rules[r], where);
    body(read_struct(R::fields(), args), where);
  }
}

// A key of patch_whitening's only: refused for another type.
Field<InitRule> whitening_only(Field<InitRule> f) {
  auto read = f.read;
  f.doc += " (patch_whitening only)";
  f.read = [read](JsonArgs& a, const std::string& key, InitRule& r) {
    MINIDL_CHECK(!a.has(key) || r.type == InitType::PatchWhitening, a.key_path(key),
                 ": only for \"type\": \"patch_whitening\"");
    read(a, key, r);
  };
  return f;
}

}  // namespace

const Fields<InitRule>& InitRule::fields() {
  static const Fields<InitRule> f{
      [] {
        std::vector<Field<InitRule>> rows = selector_rows<InitRule>();
        rows.push_back(
            choice("type", &InitRule::type, kRequired,
                   "patch_whitening: a Conv2d weight (2d, c, kh, kw), d = c*kh*kw, from the training images' "
                   "patches; dirac: identity filters; zeros, ones: constants; "
                   "unit_std: scaled to standard deviation 1"));
        rows.push_back(whitening_only(
            number("eps", &InitRule::eps, 5e-4, kAtLeastZero, "added to the patch covariance's eigenvalues")));
        rows.push_back(whitening_only(
            integer("images", &InitRule::images, 5000, {1}, "the first training images (normalized, not augmented)")));
        return rows;
      }(),
      check_selector<InitRule>};
  return f;
}

const Fields<FreezeRule>& FreezeRule::fields() {
  static const Fields<FreezeRule> f{
      [] {
        std::vector<Field<FreezeRule>> rows = selector_rows<FreezeRule>();
        // Bounded like the epoch count, so the step it becomes fits in int64.
        rows.push_back(number("from_epoch", &FreezeRule::from_epoch, 0.0,
                              {0, false, static_cast<double>(kMaxEpochs), false},
                              "the epoch the parameters stop training at (0: they never train); fractions allowed: "
                              "frozen from step ceil(from_epoch * steps per epoch)"));
        return rows;
      }(),
      check_selector<FreezeRule>};
  return f;
}

namespace {

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
  for_each_rule<InitRule>(rules, path, [&](const InitRule& rule, const std::string& where) {
    for (const NamedParam* p : matching(selector_of(rule), params, where)) {
      Tensor t = p->tensor;
      switch (rule.type) {
        case InitType::PatchWhitening:
          init_patch_whitening(*p, rule.eps, rule.images, images, where);
          break;
        case InitType::Dirac:
          MINIDL_CHECK(t.dim() == 4, where, ": dirac needs a conv weight (O, C, kh, kw), '", p->name, "' is ",
                       shape_str(t.shape()));
          init_dirac_(t);
          break;
        case InitType::Zeros:
          t.fill_(0.f);
          break;
        case InitType::Ones:
          t.fill_(1.f);
          break;
        case InitType::UnitStd:
          init_unit_std_(t);
          break;
      }
    }
  });
}

FreezeRules::FreezeRules(const nlohmann::json& rules, const std::vector<NamedParam>& params, int64_t steps_per_epoch,
                         const std::string& path) {
  for_each_rule<FreezeRule>(rules, path, [&](const FreezeRule& rule, const std::string& where) {
    const auto from_step = static_cast<int64_t>(std::ceil(rule.from_epoch * static_cast<double>(steps_per_epoch)));
    for (const NamedParam* p : matching(selector_of(rule), params, where)) {
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
