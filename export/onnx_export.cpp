#include "export/onnx_export.h"

#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "core/atomic_file.h"
#include "core/autograd.h"
#include "core/error.h"
#include "layers/activation/activation.h"
#include "layers/activation/pointwise.h"
#include "layers/containers/flatten.h"
#include "layers/containers/layer_scale.h"
#include "layers/containers/residual.h"
#include "layers/containers/scale.h"
#include "layers/containers/sequential.h"
#include "layers/containers/squeeze_excitation.h"
#include "layers/conv/conv2d.h"
#include "layers/linear/linear.h"
#include "layers/norm/batchnorm2d.h"
#include "layers/norm/groupnorm.h"
#include "layers/norm/layernorm.h"
#include "layers/norm/layernorm2d.h"
#include "layers/pool/avg_pool.h"
#include "layers/pool/pooling.h"
#include "layers/registry.h"
#include "layers/regularization/dropout.h"
#include "layers/transformer/attention.h"
#include "layers/transformer/encoder_layer.h"
#include "layers/transformer/tokens.h"
#include "onnx/onnx.pb.h"

namespace minidl {

namespace {

constexpr int64_t kOpset = 17;  // LayerNormalization's first opset; what Debian's onnx 1.12 checks

// (h, w) from an int or a list of one or two ints, as the layers print their sizes.
std::pair<int64_t, int64_t> size_pair(const nlohmann::json& j) {
  if (j.is_number_integer()) return {j.get<int64_t>(), j.get<int64_t>()};
  if (j.is_array() && j.size() == 1) return {j[0].get<int64_t>(), j[0].get<int64_t>()};
  MINIDL_CHECK(j.is_array() && j.size() == 2, "export: expected a size as an int or two ints, got ", j.dump());
  return {j[0].get<int64_t>(), j[1].get<int64_t>()};
}

// Builds one ONNX graph: nodes with unique value names, and initializers.
class GraphBuilder {
 public:
  explicit GraphBuilder(onnx::GraphProto* g) : g_(g) {}

  // Adds `op` on `inputs`; returns the node (its one output is named "<scope>/<op>_<n>").
  onnx::NodeProto* node(const std::string& op, const std::vector<std::string>& inputs, const std::string& scope) {
    onnx::NodeProto* n = g_->add_node();
    n->set_op_type(op);
    const std::string name = str(scope.empty() ? "model" : scope, "/", op, "_", counter_++);
    n->set_name(name);
    for (const auto& i : inputs) n->add_input(i);
    n->add_output(name);
    return n;
  }
  std::string add(const std::string& op, const std::vector<std::string>& inputs, const std::string& scope) {
    return node(op, inputs, scope)->output(0);
  }

  // A float32 initializer from a tensor (any device), with `dims` (default: its own shape).
  std::string weight(const std::string& name, const Tensor& t, std::vector<int64_t> dims = {}) {
    MINIDL_CHECK(t.dtype() == DType::Float32, "export: '", name, "' is ", dtype_name(t.dtype()),
                 "; only float32 weights export");
    if (dims.empty()) dims = t.shape();
    MINIDL_CHECK(shape_numel(dims) == t.numel(), "export: '", name, "': ", t.numel(), " values for dims ",
                 shape_str(dims));
    return floats(name, t.to_vector(), dims);
  }
  std::string floats(const std::string& name, const std::vector<float>& values, const std::vector<int64_t>& dims) {
    MINIDL_CHECK(names_.insert(name).second, "export: two initializers named '", name, "'");
    onnx::TensorProto* t = g_->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) t->add_dims(d);
    // raw_data is little-endian; so is every machine minidl builds for (x86-64, aarch64).
    t->set_raw_data(std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)));
    return name;
  }
  std::string int64s(const std::string& name, const std::vector<int64_t>& values) {
    onnx::TensorProto* t = int64_tensor(name, values);
    t->add_dims(static_cast<int64_t>(values.size()));
    return name;
  }
  // A 0-d int64 tensor (a Gather index that drops its axis).
  std::string int64_scalar(const std::string& name, int64_t value) {
    int64_tensor(name, {value});
    return name;
  }
  // A float scalar shared by every node that uses the same value.
  std::string scalar(float value) {
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    const std::string name = str("const/", value, "/", bits);
    if (!names_.count(name)) floats(name, {value}, {});
    return name;
  }

 private:
  onnx::TensorProto* int64_tensor(const std::string& name, const std::vector<int64_t>& values) {
    MINIDL_CHECK(names_.insert(name).second, "export: two initializers named '", name, "'");
    onnx::TensorProto* t = g_->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    for (int64_t v : values) t->add_int64_data(v);
    return t;
  }

  onnx::GraphProto* g_;
  int64_t counter_ = 0;
  std::set<std::string> names_;
};

void attr(onnx::NodeProto* n, const std::string& name, int64_t v) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}
void attr(onnx::NodeProto* n, const std::string& name, float v) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}
void attr(onnx::NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}

std::string param_name(const Module& m, const std::string& local) {
  return m.path().empty() ? local : m.path() + "." + local;
}

class Exporter;
// Emits one layer applied to the value `x`; returns the output value. `spec` is m.to_json().
using Emitter = std::string (Exporter::*)(const Module& m, const nlohmann::json& spec, const std::string& x);
const std::map<const LayerDescriptor*, Emitter>& emitters();

class Exporter {
 public:
  Exporter(onnx::GraphProto* g, int64_t input_rank) : b_(g), rank_(input_rank) {}

  // Emits `m` applied to the value `x`; returns the output value.
  std::string emit(const Module& m, const std::string& x) {
    const LayerDescriptor* layer = m.descriptor();
    const auto it = layer ? emitters().find(layer) : emitters().end();
    if (it == emitters().end())
      fail(str("export: ", m.label(), ": layer type '", m.type_name(), "' has no ONNX export"));
    return (this->*(it->second))(m, m.to_json(), x);
  }

  std::string sequential(const Module& m, const nlohmann::json&, const std::string& x) {
    std::string y = x;
    for (const auto& kv : m.children()) y = emit(*kv.second, y);
    return y;
  }
  std::string residual(const Module& m, const nlohmann::json&, const std::string& x) {
    const auto& r = dynamic_cast<const Residual&>(m);
    std::string y = x;
    for (const auto& layer : r.body()) y = emit(*layer, y);
    return b_.add("Add", {r.shortcut() ? emit(*r.shortcut(), x) : x, y}, m.path());
  }
  std::string linear(const Module& m, const nlohmann::json&, const std::string& x) {
    const auto& l = dynamic_cast<const Linear&>(m);
    if (rank_ != 2) return matmul_bias(x, param_name(m, "weight"), l.weight, param_name(m, "bias"), l.bias, m.path());
    std::vector<std::string> in = {x, b_.weight(param_name(m, "weight"), l.weight)};
    if (l.bias.defined()) in.push_back(b_.weight(param_name(m, "bias"), l.bias));
    onnx::NodeProto* n = b_.node("Gemm", in, m.path());
    attr(n, "transB", int64_t{1});
    return n->output(0);
  }
  // Eval mode: identities, no node.
  std::string identity(const Module&, const nlohmann::json&, const std::string& x) { return x; }
  // (N, C, H, W) -> (N, H*W, C).
  std::string tokens(const Module& m, const nlohmann::json&, const std::string& x) {
    const std::string& scope = m.path();
    const std::string flat = b_.add("Reshape", {x, b_.int64s(scope + "/flatten", {0, 0, -1})}, scope);
    onnx::NodeProto* n = b_.node("Transpose", {flat}, scope);
    attr(n, "perm", std::vector<int64_t>{0, 2, 1});
    rank_ = 3;
    return n->output(0);
  }
  std::string position_embedding(const Module& m, const nlohmann::json&, const std::string& x) {
    return b_.add("Add", {x, b_.weight(param_name(m, "weight"), dynamic_cast<const PositionEmbedding&>(m).weight)},
                  m.path());
  }
  // The class token expanded to (N, 1, D), the batch read off x's shape, then put before the tokens.
  std::string class_token(const Module& m, const nlohmann::json& spec, const std::string& x) {
    const std::string& scope = m.path();
    const int64_t d = spec.at("embed_dim").get<int64_t>();
    const std::string batch = b_.add("Slice", {b_.add("Shape", {x}, scope), b_.int64s(scope + "/start", {0}),
                                               b_.int64s(scope + "/end", {1})}, scope);
    onnx::NodeProto* shape = b_.node("Concat", {batch, b_.int64s(scope + "/token_shape", {1, d})}, scope);
    attr(shape, "axis", int64_t{0});
    const std::string cls = b_.add(
        "Expand", {b_.weight(param_name(m, "cls_token"), dynamic_cast<const ClassToken&>(m).cls_token), shape->output(0)},
        scope);
    onnx::NodeProto* n = b_.node("Concat", {cls, x}, scope);
    attr(n, "axis", int64_t{1});
    return n->output(0);
  }
  std::string token_pool(const Module& m, const nlohmann::json& spec, const std::string& x) {
    const std::string& scope = m.path();
    rank_ = 2;
    if (spec.at("mode").get<std::string>() == "mean") {
      onnx::NodeProto* n = b_.node("ReduceMean", {x}, scope);
      attr(n, "axes", std::vector<int64_t>{1});
      attr(n, "keepdims", int64_t{0});
      return n->output(0);
    }
    onnx::NodeProto* n = b_.node("Gather", {x, b_.int64_scalar(scope + "/first", 0)}, scope);
    attr(n, "axis", int64_t{1});
    return n->output(0);
  }
  std::string multihead_attention(const Module& m, const nlohmann::json&, const std::string& x) {
    return attention_nodes(dynamic_cast<const MultiheadAttention&>(m), x);
  }
  // nn.TransformerEncoderLayer in eval mode: the dropouts and drop paths are identities.
  std::string encoder_layer(const Module& m, const nlohmann::json& spec, const std::string& x) {
    const auto& l = dynamic_cast<const TransformerEncoderLayer&>(m);
    const std::string& scope = m.path();
    const std::string act = spec.at("activation").get<std::string>();
    auto feed_forward = [&](const std::string& v) {
      std::string h = linear(*l.linear1, nlohmann::json(), v);
      h = act == "relu" ? b_.add("Relu", {h}, l.linear1->path()) : gelu_nodes(act == "gelu_tanh", h, l.linear1->path());
      return linear(*l.linear2, nlohmann::json(), h);
    };
    auto norm = [&](const LayerNorm& ln, const std::string& v) { return layer_norm_node(ln, ln.to_json(), v); };
    if (spec.at("norm_first").get<bool>()) {
      const std::string h = b_.add("Add", {x, attention_nodes(*l.self_attn, norm(*l.norm1, x))}, scope);
      return b_.add("Add", {h, feed_forward(norm(*l.norm2, h))}, scope);
    }
    const std::string h = norm(*l.norm1, b_.add("Add", {x, attention_nodes(*l.self_attn, x)}, scope));
    return norm(*l.norm2, b_.add("Add", {h, feed_forward(h)}, scope));
  }
  std::string batch_norm(const Module& m, const nlohmann::json& spec, const std::string& x) {
    return activation_if(spec, batch_norm_node(dynamic_cast<const BatchNorm2d&>(m), x), m.path());
  }
  std::string group_norm(const Module& m, const nlohmann::json& spec, const std::string& x) {
    return activation_if(spec, group_norm_nodes(dynamic_cast<const GroupNorm&>(m), spec, x), m.path());
  }
  std::string layer_norm(const Module& m, const nlohmann::json& spec, const std::string& x) {
    return activation_if(spec, layer_norm_node(dynamic_cast<const LayerNorm&>(m), spec, x), m.path());
  }
  std::string relu(const Module& m, const nlohmann::json&, const std::string& x) {
    return b_.add("Relu", {x}, m.path());
  }
  std::string gelu(const Module& m, const nlohmann::json& spec, const std::string& x) {
    return gelu_nodes(spec.at("approximate").get<std::string>() == "tanh", x, m.path());
  }
  std::string pointwise(const Module& m, const nlohmann::json&, const std::string& x) {
    return activation_nodes(dynamic_cast<const PointwiseActivation&>(m).activation(), x, m.path());
  }
  std::string avg_pool(const Module& m, const nlohmann::json&, const std::string& x) {
    const AvgPool2dGeometry& g = dynamic_cast<const AvgPool2d&>(m).geometry();
    onnx::NodeProto* n = b_.node("AveragePool", {x}, m.path());
    attr(n, "kernel_shape", std::vector<int64_t>{g.kernel_h, g.kernel_w});
    attr(n, "strides", std::vector<int64_t>{g.stride_h, g.stride_w});
    attr(n, "pads", std::vector<int64_t>{g.pad_h, g.pad_w, g.pad_h, g.pad_w});
    attr(n, "ceil_mode", int64_t{g.ceil_mode});
    attr(n, "count_include_pad", int64_t{g.count_include_pad});
    return n->output(0);
  }
  // ONNX has no adaptive pool: an output of 1x1 is GlobalAveragePool; others need the input's
  // size, which the graph does not carry here.
  std::string adaptive_avg_pool(const Module& m, const nlohmann::json&, const std::string& x) {
    const auto& p = dynamic_cast<const AdaptiveAvgPool2d&>(m);
    MINIDL_CHECK(p.out_h() == 1 && p.out_w() == 1, "export: ", m.label(), ": ", p.describe(),
                 " has no ONNX export; only output_size=1 (GlobalAveragePool) does");
    return b_.add("GlobalAveragePool", {x}, m.path());
  }
  // (N, C, H, W) -> (N, H, W, C), LayerNormalization over the last axis, and back.
  std::string layer_norm_2d(const Module& m, const nlohmann::json& spec, const std::string& x) {
    const auto& ln = dynamic_cast<const LayerNorm2d&>(m);
    const std::string& scope = m.path();
    const std::vector<int64_t> c = {spec.at("num_channels").get<int64_t>()};
    onnx::NodeProto* last = b_.node("Transpose", {x}, scope);
    attr(last, "perm", std::vector<int64_t>{0, 2, 3, 1});
    onnx::NodeProto* n =
        b_.node("LayerNormalization",
                {last->output(0), affine(ln, ln.weight, "weight", 1.f, c), affine(ln, ln.bias, "bias", 0.f, c)}, scope);
    attr(n, "axis", int64_t{-1});
    attr(n, "epsilon", static_cast<float>(spec.at("eps").get<double>()));
    onnx::NodeProto* back = b_.node("Transpose", {n->output(0)}, scope);
    attr(back, "perm", std::vector<int64_t>{0, 3, 1, 2});
    return activation_if(spec, back->output(0), scope);
  }
  std::string layer_scale(const Module& m, const nlohmann::json&, const std::string& x) {
    const Tensor& gamma = dynamic_cast<const LayerScale2d&>(m).gamma;
    return b_.add("Mul", {x, b_.weight(param_name(m, "gamma"), gamma, {gamma.numel(), 1, 1})}, m.path());
  }
  // The gate from GlobalAveragePool, fc1, Relu, fc2 and Sigmoid, then x times it (broadcast).
  std::string squeeze_excitation(const Module& m, const nlohmann::json&, const std::string& x) {
    const auto& se = dynamic_cast<const SqueezeExcitation&>(m);
    const std::string squeezed = b_.add("GlobalAveragePool", {x}, m.path());
    const std::string hidden = b_.add("Relu", {emit(se.fc1(), squeezed)}, m.path());
    return b_.add("Mul", {x, b_.add("Sigmoid", {emit(se.fc2(), hidden)}, m.path())}, m.path());
  }
  std::string max_pool(const Module& m, const nlohmann::json& spec, const std::string& x) {
    const auto [kh, kw] = size_pair(spec.at("kernel_size"));
    const auto [sh, sw] = size_pair(spec.at("stride"));
    const auto [ph, pw] = size_pair(spec.at("padding"));
    onnx::NodeProto* n = b_.node("MaxPool", {x}, m.path());
    attr(n, "kernel_shape", std::vector<int64_t>{kh, kw});
    attr(n, "strides", std::vector<int64_t>{sh, sw});
    attr(n, "pads", std::vector<int64_t>{ph, pw, ph, pw});
    return n->output(0);
  }
  // ONNX keeps the 1x1 spatial dims; minidl's global pools return (N, C).
  std::string global_avg_pool(const Module& m, const nlohmann::json&, const std::string& x) {
    return flatten2d(b_.add("GlobalAveragePool", {x}, m.path()), m.path());
  }
  std::string global_max_pool(const Module& m, const nlohmann::json&, const std::string& x) {
    return flatten2d(b_.add("GlobalMaxPool", {x}, m.path()), m.path());
  }
  std::string flatten(const Module& m, const nlohmann::json& spec, const std::string& x) {
    const int64_t start = spec.at("start_dim").get<int64_t>(), end = spec.at("end_dim").get<int64_t>();
    MINIDL_CHECK(start == 1 && end == -1, "export: ", m.label(), ": Flatten(start_dim=", start, ", end_dim=", end,
                 ") has no ONNX export; only start_dim=1, end_dim=-1 (ONNX Flatten makes 2-D) does");
    return flatten2d(x, m.path());
  }
  std::string scale(const Module& m, const nlohmann::json&, const std::string& x) {
    return b_.add("Mul", {x, b_.scalar(dynamic_cast<const Scale&>(m).value())}, m.path());
  }
  std::string conv(const Module& m, const nlohmann::json&, const std::string& x) {
    const auto& c = dynamic_cast<const Conv2d&>(m);
    std::vector<std::string> in = {x, b_.weight(param_name(c, "weight"), c.weight)};
    if (c.bias.defined()) in.push_back(b_.weight(param_name(c, "bias"), c.bias));
    onnx::NodeProto* n = b_.node("Conv", in, c.path());
    attr(n, "kernel_shape", std::vector<int64_t>{c.kernel_size().h, c.kernel_size().w});
    attr(n, "strides", std::vector<int64_t>{c.stride().h, c.stride().w});
    attr(n, "pads", std::vector<int64_t>{c.padding().h, c.padding().w, c.padding().h, c.padding().w});
    // ONNX's defaults are 1: written only where they are not, as Conv2d::to_json does.
    if (c.dilation().h != 1 || c.dilation().w != 1)
      attr(n, "dilations", std::vector<int64_t>{c.dilation().h, c.dilation().w});
    if (c.groups() != 1) attr(n, "group", c.groups());
    return n->output(0);
  }

 private:
  // x @ weight^T (+ bias) for x of any rank: Linear over the last dimension of (N, T, D) tokens.
  std::string matmul_bias(const std::string& x, const std::string& weight_name, const Tensor& weight,
                          const std::string& bias_name, const Tensor& bias, const std::string& scope) {
    onnx::NodeProto* wt = b_.node("Transpose", {b_.weight(weight_name, weight)}, scope);
    attr(wt, "perm", std::vector<int64_t>{1, 0});
    const std::string y = b_.add("MatMul", {x, wt->output(0)}, scope);
    return bias.defined() ? b_.add("Add", {y, b_.weight(bias_name, bias)}, scope) : y;
  }

  // Self-attention on (N, T, D): the packed in-projection split into heads (3, N, H, T, hd),
  // softmax(Q K^T / sqrt(hd)) V per head, the heads joined and the out-projection.
  std::string attention_nodes(const MultiheadAttention& a, const std::string& x) {
    const std::string& scope = a.path();
    MINIDL_CHECK(!a.causal(), "export: ", a.label(),
                 ": causal attention has no ONNX export (its mask depends on the sequence length)");
    const int64_t d = a.embed_dim(), h = a.num_heads(), hd = d / h;
    const std::string qkv = matmul_bias(x, param_name(a, "in_proj_weight"), a.in_proj_weight,
                                        param_name(a, "in_proj_bias"), a.in_proj_bias, scope);
    const std::string split = b_.add("Reshape", {qkv, b_.int64s(scope + "/heads", {0, 0, 3, h, hd})}, scope);
    onnx::NodeProto* parts = b_.node("Transpose", {split}, scope);
    attr(parts, "perm", std::vector<int64_t>{2, 0, 3, 1, 4});
    auto part = [&](int64_t i, const char* name) {
      onnx::NodeProto* n = b_.node("Gather", {parts->output(0), b_.int64_scalar(str(scope, "/", name), i)}, scope);
      attr(n, "axis", int64_t{0});
      return n->output(0);
    };
    const std::string q = part(0, "q"), k = part(1, "k"), v = part(2, "v");
    onnx::NodeProto* kt = b_.node("Transpose", {k}, scope);
    attr(kt, "perm", std::vector<int64_t>{0, 1, 3, 2});
    const std::string scores = b_.add(
        "Mul", {b_.add("MatMul", {q, kt->output(0)}, scope), b_.scalar(static_cast<float>(1.0 / std::sqrt(hd)))},
        scope);
    onnx::NodeProto* p = b_.node("Softmax", {scores}, scope);
    attr(p, "axis", int64_t{-1});
    onnx::NodeProto* o = b_.node("Transpose", {b_.add("MatMul", {p->output(0), v}, scope)}, scope);
    attr(o, "perm", std::vector<int64_t>{0, 2, 1, 3});
    const std::string joined = b_.add("Reshape", {o->output(0), b_.int64s(scope + "/join", {0, 0, d})}, scope);
    const Linear& out = *a.out_proj;
    return matmul_bias(joined, param_name(out, "weight"), out.weight, param_name(out, "bias"), out.bias, out.path());
  }

  std::string flatten2d(const std::string& x, const std::string& scope) {
    rank_ = 2;
    onnx::NodeProto* n = b_.node("Flatten", {x}, scope);
    attr(n, "axis", int64_t{1});
    return n->output(0);
  }

  // The affine weight, or `fill` when the layer has none, as an initializer of `numel` values.
  std::string affine(const Module& m, const Tensor& t, const char* local, float fill, const std::vector<int64_t>& dims) {
    if (t.defined()) return b_.weight(param_name(m, local), t, dims);
    return b_.floats(str(param_name(m, local), "/", fill == 0 ? "zeros" : "ones"),
                     std::vector<float>(static_cast<size_t>(shape_numel(dims)), fill), dims);
  }

  std::string batch_norm_node(const BatchNorm2d& bn, const std::string& x) {
    const std::vector<int64_t> c = {bn.num_features()};
    onnx::NodeProto* n = b_.node("BatchNormalization",
                                 {x, affine(bn, bn.weight, "weight", 1.f, c), affine(bn, bn.bias, "bias", 0.f, c),
                                  b_.weight(param_name(bn, "running_mean"), bn.running_mean),
                                  b_.weight(param_name(bn, "running_var"), bn.running_var)},
                                 bn.path());
    attr(n, "epsilon", static_cast<float>(bn.eps()));
    return n->output(0);
  }

  std::string group_norm_nodes(const GroupNorm& gn, const nlohmann::json& spec, const std::string& x) {
    const std::string& scope = gn.path();
    const int64_t g = gn.num_groups(), c = gn.num_channels();
    // (N, C, H, W) -> (N, G, C/G*H*W): InstanceNormalization then normalizes each (n, group).
    const std::string grouped = b_.add("Reshape", {x, b_.int64s(scope + "/groups", {0, g, -1})}, scope);
    onnx::NodeProto* in = b_.node("InstanceNormalization",
                                  {grouped, b_.floats(scope + "/group_scale", std::vector<float>(g, 1.f), {g}),
                                   b_.floats(scope + "/group_bias", std::vector<float>(g, 0.f), {g})},
                                  scope);
    attr(in, "epsilon", static_cast<float>(spec.at("eps").get<double>()));
    std::string y = b_.add("Reshape", {in->output(0), b_.add("Shape", {x}, scope)}, scope);
    if (gn.weight.defined()) y = b_.add("Mul", {y, b_.weight(param_name(gn, "weight"), gn.weight, {c, 1, 1})}, scope);
    if (gn.bias.defined()) y = b_.add("Add", {y, b_.weight(param_name(gn, "bias"), gn.bias, {c, 1, 1})}, scope);
    return y;
  }

  std::string layer_norm_node(const LayerNorm& ln, const nlohmann::json& spec, const std::string& x) {
    const Shape& shape = ln.normalized_shape();
    onnx::NodeProto* n = b_.node(
        "LayerNormalization",
        {x, affine(ln, ln.weight, "weight", 1.f, shape), affine(ln, ln.bias, "bias", 0.f, shape)}, ln.path());
    attr(n, "axis", -static_cast<int64_t>(shape.size()));
    attr(n, "epsilon", static_cast<float>(spec.at("eps").get<double>()));
    return n->output(0);
  }

  // A normalization layer's fused activation ("relu", "gelu" (exact form), "silu", ...) after its
  // nodes.
  std::string activation_if(const nlohmann::json& spec, const std::string& y, const std::string& scope) {
    if (spec.value("relu", false)) return b_.add("Relu", {y}, scope);
    if (spec.value("gelu", false)) return gelu_nodes(false, y, scope);
    if (spec.value("silu", false)) return activation_nodes(Activation::SiLU, y, scope);
    if (spec.value("hardswish", false)) return activation_nodes(Activation::Hardswish, y, scope);
    if (spec.value("sigmoid", false)) return activation_nodes(Activation::Sigmoid, y, scope);
    return y;
  }

  // SiLU as x * Sigmoid(x), Hardswish (opset 14) and Sigmoid.
  std::string activation_nodes(Activation a, const std::string& x, const std::string& scope) {
    if (a == Activation::SiLU) return b_.add("Mul", {x, b_.add("Sigmoid", {x}, scope)}, scope);
    if (a == Activation::Hardswish) return b_.add("HardSwish", {x}, scope);
    MINIDL_CHECK(a == Activation::Sigmoid, "export: no ONNX nodes for activation ", static_cast<int>(a));
    return b_.add("Sigmoid", {x}, scope);
  }

  // GELU from opset-17 ops: x/2 (1 + erf(x/sqrt 2)), or with approximate="tanh"
  // x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), the formulas PyTorch's GELU computes.
  std::string gelu_nodes(bool tanh_form, const std::string& x, const std::string& scope) {
    std::string inner;
    if (tanh_form) {
      const std::string cube = b_.add("Mul", {x, b_.add("Mul", {x, x}, scope)}, scope);
      const std::string sum = b_.add("Add", {x, b_.add("Mul", {cube, b_.scalar(0.044715f)}, scope)}, scope);
      inner = b_.add("Tanh", {b_.add("Mul", {sum, b_.scalar(static_cast<float>(std::sqrt(2.0 / M_PI)))}, scope)}, scope);
    } else {
      inner = b_.add("Erf", {b_.add("Mul", {x, b_.scalar(static_cast<float>(M_SQRT1_2))}, scope)}, scope);
    }
    const std::string one_plus = b_.add("Add", {inner, b_.scalar(1.f)}, scope);
    return b_.add("Mul", {b_.add("Mul", {x, b_.scalar(0.5f)}, scope), one_plus}, scope);
  }

  GraphBuilder b_;
  int64_t rank_;  // of the value being emitted: images (4), tokens (3), features (2)
};

// The emitter of every layer type whose descriptor says it exports (onnx_exported_layers() lets
// a test check this table against the registry both ways).
const std::map<const LayerDescriptor*, Emitter>& emitters() {
  static const std::map<const LayerDescriptor*, Emitter> table = {
      {&conv2d_layer(), &Exporter::conv},
      {&linear_layer(), &Exporter::linear},
      {&batchnorm2d_layer(), &Exporter::batch_norm},
      {&batchnorm3d_layer(), &Exporter::batch_norm},
      {&groupnorm_layer(), &Exporter::group_norm},
      {&layernorm_layer(), &Exporter::layer_norm},
      {&relu_layer(), &Exporter::relu},
      {&gelu_layer(), &Exporter::gelu},
      {&silu_layer(), &Exporter::pointwise},
      {&hardswish_layer(), &Exporter::pointwise},
      {&sigmoid_layer(), &Exporter::pointwise},
      {&layernorm2d_layer(), &Exporter::layer_norm_2d},
      {&avgpool2d_layer(), &Exporter::avg_pool},
      {&adaptive_avgpool2d_layer(), &Exporter::adaptive_avg_pool},
      {&layer_scale_2d_layer(), &Exporter::layer_scale},
      {&squeeze_excitation_layer(), &Exporter::squeeze_excitation},
      {&maxpool2d_layer(), &Exporter::max_pool},
      {&global_avg_pool2d_layer(), &Exporter::global_avg_pool},
      {&global_max_pool2d_layer(), &Exporter::global_max_pool},
      {&flatten_layer(), &Exporter::flatten},
      {&scale_layer(), &Exporter::scale},
      {&sequential_layer(), &Exporter::sequential},
      {&residual_layer(), &Exporter::residual},
      {&dropout_layer(), &Exporter::identity},
      {&drop_path_layer(), &Exporter::identity},
      {&tokens_layer(), &Exporter::tokens},
      {&position_embedding_layer(), &Exporter::position_embedding},
      {&class_token_layer(), &Exporter::class_token},
      {&token_pool_layer(), &Exporter::token_pool},
      {&multihead_attention_layer(), &Exporter::multihead_attention},
      {&transformer_encoder_layer_layer(), &Exporter::encoder_layer},
  };
  return table;
}

void set_shape(onnx::ValueInfoProto* v, const std::vector<int64_t>& dims) {
  onnx::TypeProto_Tensor* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(onnx::TensorProto::FLOAT);
  onnx::TensorShapeProto* s = t->mutable_shape();
  s->add_dim()->set_dim_param("batch");
  for (int64_t d : dims) s->add_dim()->set_dim_value(d);
}

}  // namespace

std::vector<const LayerDescriptor*> onnx_exported_layers() {
  std::vector<const LayerDescriptor*> out;
  for (const auto& kv : emitters()) out.push_back(kv.first);
  return out;
}

std::string onnx_model_bytes(Module& model, const OnnxExportOptions& options) {
  onnx::ModelProto proto;
  proto.set_ir_version(8);  // the IR version of opset 17 (onnx 1.12 to 1.13)
  proto.set_producer_name("minidl");
  proto.set_producer_version("0.1");
  proto.set_doc_string(options.logits
                           ? "minidl model in eval mode: input = normalized images (batch, C, H, W), output = logits"
                           : "minidl layer in eval mode");
  onnx::OperatorSetIdProto* opset = proto.add_opset_import();
  opset->set_domain("");
  opset->set_version(kOpset);
  for (const auto& [k, v] : options.metadata) {
    onnx::StringStringEntryProto* e = proto.add_metadata_props();
    e->set_key(k);
    e->set_value(v);
  }
  onnx::GraphProto* g = proto.mutable_graph();
  g->set_name("minidl");
  set_shape(g->add_input(), options.sample);
  g->mutable_input(0)->set_name("input");
  Exporter exporter(g, static_cast<int64_t>(options.sample.size()) + 1);
  const std::string out = exporter.emit(model, "input");
  // One forward pass on a zero sample in eval mode: checks that the model takes the input shape
  // and gives the output's (the logits') shape.
  Shape output;
  {
    autograd::NoGradGuard no_grad;
    const bool was_training = model.is_training();
    model.eval();
    Device device = model.state_dict().empty() ? Device::cpu() : model.state_dict().front().second.device();
    Shape one{1};
    one.insert(one.end(), options.sample.begin(), options.sample.end());
    Tensor y = model(Tensor::zeros(one, DType::Float32, device));
    model.train(was_training);
    MINIDL_CHECK(!options.logits || y.dim() == 2, "export: the model gives ", shape_str(y.shape()),
                 " for one image; ONNX export expects (batch, classes) logits");
    output.assign(y.shape().begin() + 1, y.shape().end());
  }
  // Name the graph's output: rename the last node's output, or add an Identity when the model is
  // the identity.
  const std::string name = options.logits ? "logits" : "output";
  if (g->node_size() > 0 && g->node(g->node_size() - 1).output(0) == out) {
    g->mutable_node(g->node_size() - 1)->set_output(0, name);
  } else {
    onnx::NodeProto* n = g->add_node();
    n->set_op_type("Identity");
    n->set_name("model/Identity");
    n->add_input(out);
    n->add_output(name);
  }
  set_shape(g->add_output(), output);
  g->mutable_output(0)->set_name(name);
  return proto.SerializeAsString();
}

void export_onnx(Module& model, const std::string& path, const OnnxExportOptions& options) {
  // Atomically: a failed or killed export leaves the file that was there, never a torn one.
  write_file_atomic(path, onnx_model_bytes(model, options), "ONNX file");
}

}  // namespace minidl
