// The embedding op (argument checks, dispatch, one autograd node), the Embedding module and its
// factory.
#include "layers/transformer/embedding.h"

#include <cstdint>

#include "core/autograd.h"
#include "core/dispatch.h"
#include "core/error.h"
#include "core/field_kinds.h"
#include "core/init.h"
#include "layers/registry.h"
#include "layers/transformer/embedding_kernels.h"

namespace minidl {

Tensor embedding(const Tensor& ids_in, const Tensor& weight) {
  MINIDL_CHECK(ids_in.defined() && ids_in.dtype() == DType::Int32, "embedding: expects int32 token ids, got ",
               ids_in.defined() ? ids_in.str() : "an undefined tensor");
  MINIDL_CHECK(weight.defined() && weight.dtype() == DType::Float32 && weight.dim() == 2,
               "embedding: weight must be float32 (num_embeddings, D), got ",
               weight.defined() ? weight.str() : "an undefined tensor");
  check_same_device(ids_in, weight, "embedding ids and weight");
  const Tensor ids = ids_in.contiguous();
  const int64_t n = ids.numel(), v = weight.size(0), d = weight.size(1);
  Shape out_shape = ids.shape();
  out_shape.push_back(d);
  Tensor y = Tensor::empty(out_shape, DType::Float32, ids.device());
  dispatch(
      ids.device(), "embedding_forward",
      [&] {
        const int32_t* id = ids.data<int32_t>();
        for (int64_t i = 0; i < n; ++i)
          MINIDL_CHECK(id[i] >= 0 && id[i] < v, "embedding: token id ", id[i], " at index ", i,
                       " is out of range for num_embeddings ", v);
        kernels::embedding_forward_cpu(n, d, id, weight.data<float>(), y.data<float>());
      },
      [&] { kernels::embedding_forward_cuda(n, d, v, ids.data<int32_t>(), weight.data<float>(), y.data<float>()); });
  if (autograd::needs_grad({weight})) {
    autograd::record(y, "embedding", {weight}, [ids, v, d](const Tensor& g_in) -> std::vector<Tensor> {
      const Tensor g = g_in.to(DType::Float32).contiguous();
      Tensor dw = Tensor::empty({v, d}, DType::Float32, g.device());
      dispatch(
          g.device(), "embedding_backward",
          [&] {
            kernels::embedding_backward_cpu(ids.numel(), v, d, ids.data<int32_t>(), g.data<float>(), dw.data<float>());
          },
          [&] {
            kernels::embedding_backward_cuda(ids.numel(), v, d, ids.data<int32_t>(), g.data<float>(), dw.data<float>());
          });
      return {dw};
    });
  }
  return y;
}

Embedding::Embedding(const EmbeddingSpec& spec) : Layer(embedding_layer(), spec) {
  MINIDL_CHECK(spec.num_embeddings >= 1 && spec.embedding_dim >= 1 && spec.init_std >= 0,
               "Embedding: num_embeddings (", spec.num_embeddings, ") and embedding_dim (", spec.embedding_dim,
               ") must be >= 1 and init_std >= 0, got ", spec.init_std);
  weight = Tensor::empty({spec.num_embeddings, spec.embedding_dim});
  init_normal_(weight, static_cast<float>(spec.init_std));
  register_parameter("weight", &weight);
}

// A gathered copy forward; backward the sorted sums: dy read, dW written (and zeroed first).
std::optional<LayerWork> Embedding::work(const Tensor& x, const Tensor& y) const {
  LayerWork w;
  w.forward.bytes = work_bytes(x) + 2 * work_bytes(y);
  w.backward.flops = static_cast<double>(y.numel());
  w.backward.bytes = work_bytes(x) + work_bytes(y) + 2 * work_bytes(weight);
  return w;
}

std::string Embedding::describe() const { return str("Embedding ", num_embeddings(), "x", embedding_dim()); }

const Fields<EmbeddingSpec>& EmbeddingSpec::fields() {
  using S = EmbeddingSpec;
  static const Fields<S> f{
      {integer("num_embeddings", &S::num_embeddings, kRequired, {1, INT32_MAX}, "vocabulary size V: ids are in [0, V)"),
       integer("embedding_dim", &S::embedding_dim, kRequired, {1, kMaxFeatures}, "width D"),
       number("init_std", &S::init_std, 1.0, kAtLeastZero,
              "the weight's normal_ standard deviation (PyTorch's 1; GPT-2's 0.02)")},
      [](const S& s, const JsonArgs& args) { check_weight_size(args, {s.num_embeddings, s.embedding_dim}); }};
  return f;
}

namespace {

LayerState embedding_state(const EmbeddingSpec& s) {
  const int64_t n = s.num_embeddings * s.embedding_dim;
  return {n, n, str("Embedding ", s.num_embeddings, "x", s.embedding_dim)};
}

}  // namespace

const LayerDescriptor& embedding_layer() {
  static const LayerDescriptor layer{
      "Embedding",
      "transformer",
      "int32 token ids (B, T) -> their rows of weight (num_embeddings, embedding_dim), as torch.nn.Embedding",
      layer_fields<Embedding>(),
      make_layer<Embedding>,
      {{"num_embeddings", 11}, {"embedding_dim", 4}},
      {2, 5},
      AutocastRule::Float32,
      false,
      layer_state<Embedding, embedding_state>,
      {},
      11};
  return layer;
}

}  // namespace minidl
