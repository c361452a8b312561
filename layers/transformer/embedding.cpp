// The embedding op (argument checks, dispatch, one autograd node), the Embedding module and its
// factory.
#include "layers/transformer/embedding.h"

#include "core/autograd.h"
#include "core/dispatch.h"
#include "core/error.h"
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

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, double init_std)
    : num_embeddings_(num_embeddings), embedding_dim_(embedding_dim), init_std_(init_std) {
  MINIDL_CHECK(num_embeddings >= 1 && embedding_dim >= 1, "Embedding: num_embeddings (", num_embeddings,
               ") and embedding_dim (", embedding_dim, ") must be >= 1");
  weight = Tensor::empty({num_embeddings, embedding_dim});
  init_normal_(weight, static_cast<float>(init_std));
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

std::string Embedding::describe() const { return str("Embedding ", num_embeddings_, "x", embedding_dim_); }

nlohmann::json Embedding::to_json() const {
  return {{"type", "Embedding"},
          {"num_embeddings", num_embeddings_},
          {"embedding_dim", embedding_dim_},
          {"init_std", init_std_}};
}

namespace {

struct EmbeddingSpec {
  int64_t num_embeddings, embedding_dim;
  double init_std;
};

// Reads and checks the spec's keys: what the factory builds and the memory check counts.
EmbeddingSpec read_embedding(LayerArgs& args) {
  const int64_t num = args.get_int("num_embeddings");
  const int64_t dim = args.get_int("embedding_dim");
  MINIDL_CHECK(num >= 1 && num <= INT32_MAX, args.key_path("num_embeddings"), ": must be in 1..", INT32_MAX,
               " (int32 ids), got ", num);
  MINIDL_CHECK(dim >= 1 && dim <= kMaxFeatures, args.key_path("embedding_dim"), ": must be in 1..", kMaxFeatures,
               ", got ", dim);
  const double init_std = args.get_float("init_std", 1.0);
  MINIDL_CHECK(init_std >= 0, args.key_path("init_std"), ": must be >= 0, got ", init_std);
  args.finish();
  check_weight_size(args, {num, dim});
  return {num, dim, init_std};
}

std::shared_ptr<Module> make_embedding(LayerArgs& args) {
  const EmbeddingSpec s = read_embedding(args);
  return std::make_shared<Embedding>(s.num_embeddings, s.embedding_dim, s.init_std);
}

LayerState embedding_state(LayerArgs& args) {
  const EmbeddingSpec s = read_embedding(args);
  const int64_t n = s.num_embeddings * s.embedding_dim;
  return {n, n, str("Embedding ", s.num_embeddings, "x", s.embedding_dim)};
}

}  // namespace

const LayerDescriptor& embedding_layer() {
  static const LayerDescriptor layer{
      "Embedding",
      "transformer",
      "int32 token ids (B, T) -> their rows of weight (num_embeddings, embedding_dim), as torch.nn.Embedding",
      {required_key("num_embeddings", "int", "vocabulary size V: ids are in [0, V)"),
       required_key("embedding_dim", "int", "width D, 1..2^31"),
       default_key("init_std", "float", 1.0, "the weight's normal_ standard deviation (PyTorch's 1; GPT-2's 0.02)")},
      make_embedding,
      {{"num_embeddings", 11}, {"embedding_dim", 4}},
      {2, 5},
      AutocastRule::Float32,
      false,
      embedding_state,
      DType::Int32};
  return layer;
}

}  // namespace minidl
