// The token-sequence ops (argument checks, dispatch, one autograd node each), their modules and
// factories.
#include "layers/transformer/tokens.h"

#include "core/autograd.h"
#include "core/dispatch.h"
#include "core/error.h"
#include "core/field_kinds.h"
#include "core/init.h"
#include "core/json_limits.h"
#include "core/storage_rounding.h"
#include "layers/linear/linear_kernels.h"
#include "layers/registry.h"
#include "layers/transformer/tokens_kernels.h"

namespace minidl {

namespace {

std::string shape_or_undefined(const Tensor& x) { return x.defined() ? x.str() : std::string("an undefined tensor"); }

void check_sequence(const Tensor& x, const char* op) {
  MINIDL_CHECK(x.defined() && is_floating(x.dtype()) && x.dim() == 3, op,
               ": expects a float32, bfloat16 or float16 sequence (N, T, D), got ", shape_or_undefined(x));
}

// A view of t's storage with another shape and strides (no copy, no autograd).
Tensor restrided(const Tensor& t, const Shape& shape, const std::vector<int64_t>& strides) {
  Tensor v = t.detach();
  v.impl()->shape = shape;
  v.impl()->strides = strides;
  return v;
}

}  // namespace

// Channels-last memory is (N, H*W, C) row-major already: after the reorder (none for a
// channels-last input) the tokens are a view.
Tensor tokens(const Tensor& x) {
  MINIDL_CHECK(x.defined() && is_floating(x.dtype()) && x.dim() == 4,
               "tokens: expects a floating (N, C, H, W) input, got ", shape_or_undefined(x));
  const Tensor cl = x.to(MemoryFormat::ChannelsLast);
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  Tensor y = restrided(cl, {n, h * w, c}, {h * w * c, c, 1});
  if (autograd::needs_grad({cl})) {
    autograd::record(y, "tokens", {cl}, [n, c, h, w](const Tensor& g) -> std::vector<Tensor> {
      const Tensor gc = g.contiguous();
      return {restrided(gc, {n, c, h, w}, {h * w * c, 1, w * c, c})};
    });
  }
  return y;
}

Tensor add_position_embedding(const Tensor& x_in, const Tensor& weight) {
  check_sequence(x_in, "add_position_embedding");
  MINIDL_CHECK(weight.defined() && weight.dtype() == DType::Float32 && weight.dim() == 3 && weight.size(0) == 1 &&
                   weight.size(1) >= x_in.size(1) && weight.size(2) == x_in.size(2),
               "add_position_embedding: weight must be float32 (1, >= ", x_in.size(1), ", ", x_in.size(2),
               ") for input ", shape_str(x_in.shape()), ", got ", shape_or_undefined(weight));
  check_same_device(x_in, weight, "add_position_embedding input and weight");
  const Tensor x = as_float32(x_in).contiguous();
  const int64_t rows = x.size(0), m = x.size(1) * x.size(2);
  Tensor y = Tensor::empty(x.shape(), DType::Float32, x.device());
  dispatch(
      x.device(), "add_position_embedding",
      [&] { kernels::add_position_cpu(rows, m, x.data<float>(), weight.data<float>(), y.data<float>()); },
      [&] { kernels::add_position_cuda(rows, m, x.data<float>(), weight.data<float>(), y.data<float>()); });
  if (autograd::needs_grad({x, weight})) {
    const bool need_w = weight.requires_grad();
    autograd::record(y, "add_position_embedding", {x, weight},
                     [rows, m, need_w, wshape = weight.shape()](const Tensor& g_in) -> std::vector<Tensor> {
                       const Tensor g = g_in.to(DType::Float32).contiguous();
                       Tensor dw;
                       if (need_w) {
                         // The bias gradient's column sums (deterministic on both devices) over the
                         // positions used; the rows of positions past T get 0.
                         dw = m == wshape[1] * wshape[2] ? Tensor::empty(wshape, DType::Float32, g.device())
                                                         : Tensor::zeros(wshape, DType::Float32, g.device());
                         dispatch(
                             g.device(), "add_position_embedding_backward",
                             [&] { kernels::linear_backward_bias_cpu(rows, m, g.data<float>(), dw.data<float>()); },
                             [&] { kernels::linear_backward_bias_cuda(rows, m, g.data<float>(), dw.data<float>()); });
                       }
                       return {g, dw};
                     });
  }
  return y;
}

Tensor prepend_class_token(const Tensor& x_in, const Tensor& cls) {
  check_sequence(x_in, "prepend_class_token");
  const int64_t n = x_in.size(0), t = x_in.size(1), d = x_in.size(2);
  MINIDL_CHECK(cls.defined() && cls.dtype() == DType::Float32 && cls.shape() == Shape({1, 1, d}),
               "prepend_class_token: cls_token must be float32 (1, 1, ", d, ") for input ", shape_str(x_in.shape()),
               ", got ", shape_or_undefined(cls));
  check_same_device(x_in, cls, "prepend_class_token input and cls_token");
  const Tensor x = as_float32(x_in).contiguous();
  Tensor y = Tensor::empty({n, t + 1, d}, DType::Float32, x.device());
  dispatch(
      x.device(), "prepend_class_token",
      [&] { kernels::prepend_token_cpu(n, t, d, x.data<float>(), cls.data<float>(), y.data<float>()); },
      [&] { kernels::prepend_token_cuda(n, t, d, x.data<float>(), cls.data<float>(), y.data<float>()); });
  if (autograd::needs_grad({x, cls})) {
    const bool need_x = x.requires_grad(), need_cls = cls.requires_grad();
    autograd::record(y, "prepend_class_token", {x, cls},
                     [n, t, d, need_x, need_cls](const Tensor& g_in) -> std::vector<Tensor> {
                       const Tensor g = g_in.to(DType::Float32).contiguous();
                       Tensor dx = need_x ? Tensor::empty({n, t, d}, DType::Float32, g.device()) : Tensor();
                       Tensor dcls = need_cls ? Tensor::empty({1, 1, d}, DType::Float32, g.device()) : Tensor();
                       float* px = dx.defined() ? dx.data<float>() : nullptr;
                       float* pc = dcls.defined() ? dcls.data<float>() : nullptr;
                       dispatch(
                           g.device(), "prepend_class_token_backward",
                           [&] { kernels::prepend_token_backward_cpu(n, t, d, g.data<float>(), px, pc); },
                           [&] { kernels::prepend_token_backward_cuda(n, t, d, g.data<float>(), px, pc); });
                       return {dx, dcls};
                     });
  }
  return y;
}

Tensor token_pool(const Tensor& x_in, bool mean) {
  check_sequence(x_in, "token_pool");
  // Half: storage-rounded (float32 pool, the result rounded once).
  if (holds_half(x_in)) return token_pool(as_float32(x_in), mean).to(x_in.dtype());
  const Tensor x = x_in.contiguous();
  const int64_t n = x.size(0), t = x.size(1), d = x.size(2);
  MINIDL_CHECK(t >= 1, "token_pool: input ", shape_str(x.shape()), " has no tokens");
  Tensor y = Tensor::empty({n, d}, DType::Float32, x.device());
  dispatch(
      x.device(), "token_pool", [&] { kernels::token_pool_cpu(mean, n, t, d, x.data<float>(), y.data<float>()); },
      [&] { kernels::token_pool_cuda(mean, n, t, d, x.data<float>(), y.data<float>()); });
  if (autograd::needs_grad({x})) {
    autograd::record(y, "token_pool", {x}, [mean, n, t, d](const Tensor& g_in) -> std::vector<Tensor> {
      const Tensor g = g_in.to(DType::Float32).contiguous();
      Tensor dx = Tensor::empty({n, t, d}, DType::Float32, g.device());
      dispatch(
          g.device(), "token_pool_backward",
          [&] { kernels::token_pool_backward_cpu(mean, n, t, d, g.data<float>(), dx.data<float>()); },
          [&] { kernels::token_pool_backward_cuda(mean, n, t, d, g.data<float>(), dx.data<float>()); });
      return {dx};
    });
  }
  return y;
}

PositionEmbedding::PositionEmbedding(const PositionEmbeddingSpec& spec) : Layer(position_embedding_layer(), spec) {
  const int64_t num_tokens = spec.num_tokens, embed_dim = spec.embed_dim;
  const double init_std = spec.init_std;
  MINIDL_CHECK(num_tokens >= 1 && embed_dim >= 1 && init_std >= 0, "PositionEmbedding: num_tokens and embed_dim must "
               "be >= 1 and init_std >= 0, got ", num_tokens, ", ", embed_dim, ", ", init_std);
  weight = Tensor::empty({1, num_tokens, embed_dim});
  init_trunc_normal_(weight, static_cast<float>(init_std));
  register_parameter("weight", &weight);
}

Tensor PositionEmbedding::forward(const Tensor& x) {
  MINIDL_CHECK(x.defined() && x.dim() == 3 && x.size(1) >= 1 && x.size(1) <= spec().num_tokens &&
                   x.size(2) == spec().embed_dim,
               label(), ": expected input (N, T, ", spec().embed_dim, ") with T in 1..", spec().num_tokens, ", got ",
               shape_or_undefined(x));
  return add_position_embedding(x, weight);
}

std::string PositionEmbedding::describe() const {
  return str("PositionEmbedding ", spec().num_tokens, "x", spec().embed_dim);
}

ClassToken::ClassToken(const ClassTokenSpec& spec) : Layer(class_token_layer(), spec) {
  const int64_t embed_dim = spec.embed_dim;
  MINIDL_CHECK(embed_dim >= 1, "ClassToken: embed_dim must be >= 1, got ", embed_dim);
  cls_token = Tensor::zeros({1, 1, embed_dim});
  register_parameter("cls_token", &cls_token);
}

Tensor ClassToken::forward(const Tensor& x) {
  MINIDL_CHECK(x.defined() && x.dim() == 3 && x.size(2) == spec().embed_dim, label(), ": expected input (N, T, ",
               spec().embed_dim, "), got ", shape_or_undefined(x));
  return prepend_class_token(x, cls_token);
}

std::string ClassToken::describe() const { return str("ClassToken ", spec().embed_dim); }

// The reorder from NCHW (none from channels-last memory: a view) each way.
std::optional<LayerWork> Tokens::work(const Tensor& x, const Tensor& y) const {
  LayerWork w;
  if (x.is_channels_last()) return w;
  w.forward.bytes = work_bytes(x) + work_bytes(y);
  if (x.requires_grad()) w.backward.bytes = w.forward.bytes;
  return w;
}

// One add per element; backward: dx is dy itself, dW the batch sum of dy (one add per element).
std::optional<LayerWork> PositionEmbedding::work(const Tensor& x, const Tensor& y) const {
  LayerWork w;
  w.forward.flops = static_cast<double>(y.numel());
  w.forward.bytes = work_bytes(x) + work_bytes(weight) + work_bytes(y);
  w.backward.flops = static_cast<double>(y.numel());
  w.backward.bytes = work_bytes(y) + work_bytes(weight);
  return w;
}

// A copy each way, plus the batch sum of the class token's gradient.
std::optional<LayerWork> ClassToken::work(const Tensor& x, const Tensor& y) const {
  LayerWork w;
  w.forward.bytes = work_bytes(x) + work_bytes(cls_token) + work_bytes(y);
  w.backward.flops = static_cast<double>(x.size(0) * spec().embed_dim);
  w.backward.bytes = work_bytes(y) + (x.requires_grad() ? work_bytes(x) : 0.0) + work_bytes(cls_token);
  return w;
}

// mean: one add per input element and a divide per output; cls: a copy. The backward writes dx.
std::optional<LayerWork> TokenPool::work(const Tensor& x, const Tensor& y) const {
  LayerWork w;
  w.forward.flops = mean() ? static_cast<double>(x.numel() + y.numel()) : 0.0;
  w.forward.bytes = (mean() ? work_bytes(x) : work_bytes(y)) + work_bytes(y);
  if (x.requires_grad()) {
    w.backward.flops = mean() ? static_cast<double>(x.numel()) : 0.0;
    w.backward.bytes = work_bytes(y) + work_bytes(x);
  }
  return w;
}

const Fields<PositionEmbeddingSpec>& PositionEmbeddingSpec::fields() {
  using S = PositionEmbeddingSpec;
  static const Fields<S> f{
      {integer("num_tokens", &S::num_tokens, kRequired, {1, kMaxFeatures}, "tokens T"),
       integer("embed_dim", &S::embed_dim, kRequired, {1, kMaxFeatures}, "width D"),
       number("init_std", &S::init_std, 0.02, kAtLeastZero, "the weight's trunc_normal_ standard deviation")},
      [](const S& s, const JsonArgs& args) {
        check_weight_size(args, {1, s.num_tokens, s.embed_dim});
      }};
  return f;
}

const Fields<ClassTokenSpec>& ClassTokenSpec::fields() {
  static const Fields<ClassTokenSpec> f{
      {integer("embed_dim", &ClassTokenSpec::embed_dim, kRequired, {1, kMaxFeatures}, "width D")}};
  return f;
}

const Fields<TokenPoolSpec>& TokenPoolSpec::fields() {
  static const Fields<TokenPoolSpec> f{
      {choice("mode", &TokenPoolSpec::mode, TokenPoolMode::Mean, "the mean over tokens, or token 0 (\"cls\")")}};
  return f;
}

namespace {

LayerState position_embedding_state(const PositionEmbeddingSpec& s) {
  const int64_t n = s.num_tokens * s.embed_dim;
  return {n, n, str("PositionEmbedding ", s.num_tokens, "x", s.embed_dim)};
}

LayerState class_token_state(const ClassTokenSpec& s) {
  return {s.embed_dim, s.embed_dim, str("ClassToken ", s.embed_dim)};
}

}  // namespace

const LayerDescriptor& tokens_layer() {
  static const LayerDescriptor layer{
      "Tokens",     "transformer",           "(N, C, H, W) -> (N, H*W, C) tokens, x.flatten(2).transpose(1, 2)",
      {},           make_layer<Tokens>,      nlohmann::json::object(),
      {2, 3, 4, 4}, AutocastRule::InputType, true};
  return layer;
}

const LayerDescriptor& position_embedding_layer() {
  static const LayerDescriptor layer{
      "PositionEmbedding",
      "transformer",
      "x + weight[:, :T] over (N, T, embed_dim), T <= num_tokens, weight (1, num_tokens, embed_dim) learned",
      layer_fields<PositionEmbedding>(),
      make_layer<PositionEmbedding>,
      {{"num_tokens", 5}, {"embed_dim", 4}},
      {2, 5, 4},
      AutocastRule::Float32,
      true,
      layer_state<PositionEmbedding, position_embedding_state>};
  return layer;
}

const LayerDescriptor& class_token_layer() {
  static const LayerDescriptor layer{"ClassToken",
                                     "transformer",
                                     "prepends a learned cls_token (1, 1, embed_dim): (N, T, D) -> (N, T + 1, D)",
                                     layer_fields<ClassToken>(),
                                     make_layer<ClassToken>,
                                     {{"embed_dim", 4}},
                                     {2, 5, 4},
                                     AutocastRule::Float32,
                                     true,
                                     layer_state<ClassToken, class_token_state>};
  return layer;
}

const LayerDescriptor& token_pool_layer() {
  static const LayerDescriptor layer{"TokenPool",
                                     "transformer",
                                     "(N, T, D) -> (N, D): the mean over tokens, or token 0",
                                     layer_fields<TokenPool>(),
                                     make_layer<TokenPool>,
                                     nlohmann::json::object(),
                                     {2, 5, 4},
                                     AutocastRule::InputType,
                                     true,
                                     nullptr,
                                     {{{{"mode", "cls"}}, {2, 5, 4}}}};
  return layer;
}

}  // namespace minidl
