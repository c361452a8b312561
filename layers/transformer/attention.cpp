// The self_attention op (argument checks, dispatch, one autograd node), the MultiheadAttention
// module and its factory.
#include "layers/transformer/attention.h"

#include <cmath>
#include <type_traits>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/dispatch.h"
#include "core/error.h"
#include "core/field_kinds.h"
#include "core/init.h"
#include "core/storage_rounding.h"
#include "layers/registry.h"
#include "layers/regularization/dropout.h"
#include "layers/transformer/attention_kernels.h"

namespace minidl {

namespace {

// Which kernels run a call on the GPU.
enum class AttentionPath { Gemm, Fused, Flash };

// Whether the fused (short) or flash (long) kernels take a call with `data`; the GEMMs take any.
// A CPU-only build has neither (their launchers are CUDA code).
template <class T>
bool fits(AttentionPath path, const kernels::AttentionShape& s, const T* data) {
#ifdef MINIDL_WITH_CUDA
  if (path == AttentionPath::Fused) return kernels::attention_fused_cuda_fits(s, data);
  if (path == AttentionPath::Flash) return kernels::attention_flash_cuda_fits(s, data);
  return true;
#else
  (void)s, (void)data;
  return path == AttentionPath::Gemm;
#endif
}

bool fits(AttentionPath path, const kernels::AttentionShape& s, const Tensor& x) {
  return dispatch_dtype(x.dtype(), "attention", [&](auto tag) { return fits(path, s, x.data<decltype(tag)>()); });
}

}  // namespace

Tensor self_attention(const Tensor& qkv, int64_t num_heads, float dropout_p, uint32_t salt, bool causal,
                      std::shared_ptr<DropoutState> dropout_state) {
  MINIDL_CHECK(qkv.defined() && is_floating(qkv.dtype()) && qkv.dim() == 3,
               "self_attention: expects a float32, bfloat16 or float16 input (N, T, 3 * embed_dim), got ",
               qkv.defined() ? qkv.str() : "undefined");
  MINIDL_CHECK(num_heads >= 1 && qkv.size(2) % (3 * num_heads) == 0, "self_attention: the last dim ", qkv.size(2),
               " of ", shape_str(qkv.shape()), " is not 3 * num_heads (", num_heads, ") * head_dim");
  MINIDL_CHECK(dropout_p >= 0.f && dropout_p <= 1.f, "self_attention: dropout_p must be in [0, 1], got ", dropout_p);
  if (!dropout_state) dropout_state = default_dropout_state();
  if (holds_half(qkv) && !qkv.is_cuda())
    return self_attention(as_float32(qkv), num_heads, dropout_p, salt, causal, dropout_state).to(qkv.dtype());
  const Tensor x = qkv.contiguous();
  const kernels::AttentionShape s{x.size(0), x.size(1), num_heads, x.size(2) / (3 * num_heads), causal};
  const DType t = x.dtype();
  const Device dev = x.device();
  const bool drop = dropout_p > 0.f;
  DropoutState& state = *dropout_state;
  const DropoutDraw draw = state.draw(dropout_p, salt, 1);
  const DropoutDraw* d = drop ? &draw : nullptr;
  MINIDL_CHECK(!drop || s.batch * s.heads * s.tokens * s.tokens <= kMaxDropoutDraws,
               "self_attention: attention dropout over ", shape_str(qkv.shape()), " needs more than ",
               kMaxDropoutDraws, " draws in one step");
  const int64_t step = state.step();
  // Short sequences in half precision run the fused kernels (the faster path wherever they fit; they
  // keep no probabilities), longer ones without dropout the flash kernels (they keep one float per
  // query); the rest the batched GEMMs with the probabilities saved for the backward.
  AttentionPath path = AttentionPath::Gemm;
  if (dev.is_cuda() && fits(AttentionPath::Fused, s, x))
    path = AttentionPath::Fused;
  else if (dev.is_cuda() && !drop && fits(AttentionPath::Flash, s, x))
    path = AttentionPath::Flash;
  Tensor probs, dropped, lse;
  if (path == AttentionPath::Gemm) {
    probs = Tensor::empty({s.batch, s.heads, s.tokens, s.tokens}, t, dev);
    dropped = drop ? Tensor::empty_like(probs) : probs;
  }
  if (path == AttentionPath::Flash) lse = Tensor::empty({s.batch, s.heads, s.tokens}, DType::Float32, dev);
  Tensor y = Tensor::empty({s.batch, s.tokens, s.width()}, t, dev);
  dispatch(
      dev, "attention_forward",
      [&] {
        kernels::attention_forward_cpu(s, d, step, x.data<float>(), probs.data<float>(), dropped.data<float>(),
                                       y.data<float>());
      },
      [&] {
        dispatch_dtype(t, "attention", [&](auto tag) {
          using T = decltype(tag);
          if constexpr (!std::is_same_v<T, float>) {
            if (path == AttentionPath::Fused)
              return kernels::attention_fused_forward_cuda(s, d, state.step_on(dev), x.data<T>(), y.data<T>());
            if (path == AttentionPath::Flash)
              return kernels::attention_flash_forward_cuda(s, x.data<T>(), y.data<T>(), lse.data<float>());
          }
          kernels::attention_forward_cuda(s, d, state.step_on(dev), x.data<T>(), probs.data<T>(), dropped.data<T>(),
                                          y.data<T>());
        });
      });
  if (autograd::needs_grad({qkv})) {
    // The flash backward reads the output (detached: the node must not own its own output).
    const Tensor ys = path == AttentionPath::Flash ? y.detach() : Tensor();
    autograd::record(y, "attention", {x},
                     [s, t, draw, drop, step, path, dropout_state, xs = x.detach(), probs, dropped, lse,
                      ys](const Tensor& dy_in) -> std::vector<Tensor> {
                       Tensor dy = dy_in.to(t).contiguous();
                       const DropoutDraw* d = drop ? &draw : nullptr;
                       Tensor dqkv = Tensor::empty(xs.shape(), t, dy.device());
                       if (!fits(path, s, dy)) dy = dy.clone();  // a misaligned view
                       dispatch(
                           dy.device(), "attention_backward",
                           [&] {
                             kernels::attention_backward_cpu(s, d, step, xs.data<float>(), probs.data<float>(),
                                                             dropped.data<float>(), dy.data<float>(),
                                                             dqkv.data<float>());
                           },
                           [&] {
                             dispatch_dtype(t, "attention", [&](auto tag) {
                               using T = decltype(tag);
                               const int64_t* step_word = dropout_state->step_on(dy.device());
                               if constexpr (!std::is_same_v<T, float>) {
                                 if (path == AttentionPath::Fused)
                                   return kernels::attention_fused_backward_cuda(s, d, step_word, xs.data<T>(),
                                                                                 dy.data<T>(), dqkv.data<T>());
                                 if (path == AttentionPath::Flash)
                                   return kernels::attention_flash_backward_cuda(
                                       s, xs.data<T>(), ys.data<T>(), dy.data<T>(), lse.data<float>(), dqkv.data<T>());
                               }
                               kernels::attention_backward_cuda(s, d, step_word, xs.data<T>(), probs.data<T>(),
                                                                dropped.data<T>(), dy.data<T>(), dqkv.data<T>());
                             });
                           });
                       return {dqkv};
                     });
  }
  return y;
}

MultiheadAttention::MultiheadAttention(const MultiheadAttentionSpec& spec) : Layer(multihead_attention_layer(), spec) {
  const int64_t embed_dim = spec.embed_dim, num_heads = spec.num_heads;
  const double dropout = spec.dropout;
  const bool bias = spec.bias;
  MINIDL_CHECK(embed_dim >= 1 && num_heads >= 1 && embed_dim % num_heads == 0, "MultiheadAttention: embed_dim (",
               embed_dim, ") must be a positive multiple of num_heads (", num_heads, ")");
  MINIDL_CHECK(dropout >= 0 && dropout <= 1, "MultiheadAttention: dropout must be in [0, 1], got ", dropout);
  in_proj_weight = Tensor::empty({3 * embed_dim, embed_dim});
  // xavier_uniform_: U(-a, a), a = sqrt(6 / (fan_in + fan_out)) = sqrt(6 / (D + 3D)).
  init_uniform_(in_proj_weight, std::sqrt(6.f / static_cast<float>(4 * embed_dim)));
  register_parameter("in_proj_weight", &in_proj_weight);
  if (bias) {
    in_proj_bias = Tensor::zeros({3 * embed_dim});
    register_parameter("in_proj_bias", &in_proj_bias);
  }
  out_proj = std::make_shared<Linear>(embed_dim, embed_dim, bias);
  if (bias) out_proj->bias.zero_();
  register_module("out_proj", out_proj);
}

Tensor MultiheadAttention::forward(const Tensor& x) {
  MINIDL_CHECK(x.defined() && x.dim() == 3 && x.size(2) == embed_dim(), label(), ": expected input (N, T, ",
               embed_dim(), "), got ", x.defined() ? shape_str(x.shape()) : std::string("an undefined tensor"));
  // The input projection as Linear::forward runs it (autocast casts the operands).
  Tensor qkv;
  if (autocast_active()) {
    const DType t = autocast_dtype();
    qkv = linear(x.to(t), in_proj_weight.to(t), in_proj_bias.defined() ? in_proj_bias.to(t) : in_proj_bias);
  } else {
    qkv = linear(x, in_dtype_of(in_proj_weight, x), in_dtype_of(in_proj_bias, x));
  }
  const float p = is_training() ? static_cast<float>(spec().dropout) : 0.f;
  return (*out_proj)(self_attention(qkv, num_heads(), p, dropout_salt(path()), causal(), dropout_state()));
}

// In-projection: 2 FLOPs per multiply-add of (N*T, D) x (D, 3D) plus the bias; x, the weight and
// bias read, qkv written. Attention: Q K^T and P V, 2 * T * T * D multiply-adds per sample, and 5
// FLOPs per score for the softmax (max, subtract, exp, sum, scale); qkv read, the heads' output
// written (the fused kernels' minimum: no T x T tensor in memory). Backward: twice the products'
// FLOPs each, the softmax's again; dout and qkv read, dqkv written; dW (float32), db and dx.
// Saved: x and qkv.
std::optional<LayerWork> MultiheadAttention::work(const Tensor& x, const Tensor& y) const {
  const double tokens = static_cast<double>(x.numel() / embed_dim()), d = static_cast<double>(embed_dim());
  const double t = static_cast<double>(x.size(1)), scores = tokens * t * static_cast<double>(num_heads());
  const double act = work_bytes(y);  // one (N, T, D) activation
  const double w_bytes = work_bytes(in_proj_weight.numel(), y.dtype()) +
                         work_bytes(in_proj_bias.defined() ? in_proj_bias.numel() : 0, y.dtype());
  LayerWork w;
  const double proj = 2 * tokens * d * 3 * d + (in_proj_bias.defined() ? tokens * 3 * d : 0.0);
  const double attention = 4 * tokens * t * d + 5 * scores;
  w.forward.flops = proj + attention;
  w.forward.bytes = work_bytes(x) + w_bytes + 3 * act + 3 * act + act;
  w.backward.flops = 2 * proj + 8 * tokens * t * d + 4 * scores;
  w.backward.bytes = act + 3 * act + 3 * act + 3 * act + work_bytes(x) + w_bytes + work_bytes(in_proj_weight) +
                     (in_proj_bias.defined() ? work_bytes(in_proj_bias) : 0.0) + (x.requires_grad() ? work_bytes(x) : 0.0);
  w.saved_bytes = work_bytes(x) + 3 * act;
  return w;
}

// in_proj_weight (3D, D), out_proj.weight (D, D) and, with bias, in_proj_bias (3D) and out_proj.bias (D).
int64_t multihead_attention_elements(int64_t embed_dim, bool bias) {
  return 4 * embed_dim * embed_dim + (bias ? 4 * embed_dim : 0);
}

std::string MultiheadAttention::describe() const {
  return str("MultiheadAttention ", embed_dim(), " h", num_heads(), causal() ? " causal" : "");
}

const Fields<MultiheadAttentionSpec>& MultiheadAttentionSpec::fields() {
  using S = MultiheadAttentionSpec;
  static const Fields<S> f{
      {integer("embed_dim", &S::embed_dim, kRequired, {1, kMaxFeatures}, "model width D"),
       integer("num_heads", &S::num_heads, kRequired, {1, kMaxFeatures}, "attention heads; must divide embed_dim"),
       number("dropout", &S::dropout, 0.0, kUnitInterval, "dropout on the attention probabilities in training"),
       flag("bias", &S::bias, true, "in_proj_bias and out_proj.bias"),
       written_when_set(flag("causal", &S::causal, false,
                             "each token attends to itself and the tokens before it (is_causal=True)"))},
      [](const S& s, const JsonArgs& args) {
        MINIDL_CHECK(s.embed_dim % s.num_heads == 0, args.key_path("num_heads"), ": must divide embed_dim (",
                     s.embed_dim, "), got ", s.num_heads);
        check_weight_size(args, {3 * s.embed_dim, s.embed_dim});
      }};
  return f;
}

namespace {

LayerState multihead_attention_state(const MultiheadAttentionSpec& s) {
  return {multihead_attention_elements(s.embed_dim, s.bias), 3 * s.embed_dim * s.embed_dim,
          str("MultiheadAttention ", s.embed_dim, " h", s.num_heads)};
}

}  // namespace

const LayerDescriptor& multihead_attention_layer() {
  static const LayerDescriptor layer{
      "MultiheadAttention",
      "transformer",
      "self-attention on (N, T, embed_dim), as torch.nn.MultiheadAttention(batch_first=True)(x, x, x)",
      layer_fields<MultiheadAttention>(),
      make_layer<MultiheadAttention>,
      {{"embed_dim", 8}, {"num_heads", 2}},
      {2, 5, 8},
      AutocastRule::LowerPrecision,
      true,
      layer_state<MultiheadAttention, multihead_attention_state>,
      {{{{"embed_dim", 12}, {"num_heads", 3}, {"dropout", 0.2}, {"bias", false}}, {3, 7, 12}},
       // Causal with dropout, head size 16: the fused kernels' masked path in the half types.
       {{{"embed_dim", 32}, {"num_heads", 2}, {"dropout", 0.1}, {"causal", true}}, {2, 9, 32}, false},
       // Causal over 65 tokens, head size 16: past the fused kernels' 64, the flash kernels' path
       // (two query blocks, the second one partial) in the half types.
       {{{"embed_dim", 16}, {"num_heads", 1}, {"causal", true}}, {1, 65, 16}, false}}};
  return layer;
}

}  // namespace minidl
