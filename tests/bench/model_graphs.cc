#include "model_graphs.h"

#include <cstdlib>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "adapter/graph_convert.h"

namespace echo::bench {
namespace {

using planner::GraphBuilder;
using planner::OpClass;
using planner::OpSpec;
using planner::Phase;
using planner::TensorRole;
using planner::TensorSpec;

// A device of ~100 TFLOP/s and ~2 TB/s, plus a launch overhead.
double OpSeconds(double flops, double bytes_moved) {
  return std::max(flops / 100e12, bytes_moved / 2e12) + 2e-6;
}

// Builds forward ops and derives the mirrored backward (each op's gradient
// reads what the op saves for it; gradients of shared activations are
// accumulated) and the optimizer updates.
class TrainingGraphBuilder {
 public:
  explicit TrainingGraphBuilder(std::string name) : builder_(std::move(name)) {}

  std::string Input(const std::string& id, int64_t bytes) {
    AddTensor(id, bytes, TensorRole::kInput);
    return id;
  }
  std::string Param(const std::string& id, int64_t bytes) {
    AddTensor(id, bytes, TensorRole::kParameter);
    params_.push_back(id);
    return id;
  }

  struct Saved {
    bool inputs = true;   // the backward reads the activation inputs
    bool output = false;  // ... and the output
  };
  // One forward op with one output; returns the output id.
  std::string Forward(const std::string& id, OpClass op_class,
                      std::vector<std::string> inputs, int64_t output_bytes,
                      double flops, Saved saved = Saved{true, false},
                      bool recomputable = true) {
    const std::string out = absl::StrCat(id, ".out");
    AddTensor(out, output_bytes, TensorRole::kActivation);
    int64_t moved = output_bytes;
    for (const std::string& input : inputs) moved += bytes_[input];
    OpSpec spec;
    spec.id = id;
    spec.op_class = op_class;
    spec.phase = Phase::kForward;
    spec.input_ids = inputs;
    spec.output_ids = {out};
    spec.flops = flops;
    if (!recomputable) {
      spec.recomputable_set = true;
      spec.recomputable = false;
    }
    const double seconds = OpSeconds(flops, static_cast<double>(moved));
    AddOp(std::move(spec), seconds);
    forward_.push_back(
        {id, op_class, std::move(inputs), out, flops, moved, saved});
    return out;
  }

  ModelGraph Finish(const std::string& loss) {
    // Backward, mirrored. Gradients of an activation read by several ops
    // are summed as they arrive (as autograd does), into a running sum.
    std::map<std::string, std::string> running;
    running[loss] = loss;  // d loss / d loss: read the loss itself
    int accumulations = 0;
    std::map<std::string, std::string> param_grads;
    for (auto it = forward_.rbegin(); it != forward_.rend(); ++it) {
      const ForwardOp& f = *it;
      auto grad_it = running.find(f.output);
      if (grad_it == running.end()) continue;
      const std::string grad = grad_it->second;
      OpSpec spec;
      spec.id = absl::StrCat(f.id, ".bwd");
      spec.op_class =
          f.op_class == OpClass::kRandom ? OpClass::kElementwise : f.op_class;
      spec.phase = Phase::kBackward;
      spec.input_ids = {grad};
      if (f.saved.output) spec.input_ids.push_back(f.output);
      std::vector<std::pair<std::string, std::string>> activation_grads;
      for (const std::string& input : f.inputs) {
        const bool is_param = roles_[input] == TensorRole::kParameter;
        if (is_param || f.saved.inputs) spec.input_ids.push_back(input);
        if (roles_[input] == TensorRole::kInput) continue;
        const std::string g = absl::StrCat("d.", f.id, ".", input);
        AddTensor(g, bytes_[input],
                  is_param ? TensorRole::kGradient : TensorRole::kActivation);
        spec.output_ids.push_back(g);
        if (is_param) {
          param_grads[input] = g;  // a shared parameter: last one wins
        } else {
          activation_grads.push_back({input, g});
        }
      }
      if (spec.output_ids.empty()) continue;
      const double flops = f.op_class == OpClass::kGemm ? 2 * f.flops : f.flops;
      AddOp(std::move(spec), OpSeconds(flops, 2.0 * f.moved));
      for (const auto& [input, g] : activation_grads) {
        auto sum = running.find(input);
        if (sum == running.end()) {
          running[input] = g;
          continue;
        }
        const std::string total =
            absl::StrCat("acc", accumulations++, ".", input);
        AddTensor(total, bytes_[input], TensorRole::kActivation);
        OpSpec acc;
        acc.id = absl::StrCat(total, ".op");
        acc.op_class = OpClass::kElementwise;
        acc.phase = Phase::kBackward;
        acc.input_ids = {sum->second, g};
        acc.output_ids = {total};
        AddOp(std::move(acc), OpSeconds(0, 3.0 * bytes_[input]));
        sum->second = total;
      }
    }
    // Optimizer: Adam-like update per parameter.
    for (const std::string& param : params_) {
      auto grad = param_grads.find(param);
      if (grad == param_grads.end()) continue;
      const std::string state = absl::StrCat(param, ".adam");
      AddTensor(state, 2 * bytes_[param], TensorRole::kOptimizerState);
      const std::string updated = absl::StrCat(param, ".new");
      AddTensor(updated, bytes_[param], TensorRole::kParameter);
      OpSpec update;
      update.id = absl::StrCat(param, ".update");
      update.op_class = OpClass::kElementwise;
      update.phase = Phase::kOptimizer;
      update.input_ids = {param, grad->second, state};
      update.output_ids = {updated};
      AddOp(std::move(update),
            OpSeconds(0, 5.0 * static_cast<double>(bytes_[param])));
    }
    builder_.MarkOutputs({loss});
    absl::StatusOr<planner::Graph> graph = std::move(builder_).Build();
    if (!graph.ok()) std::abort();  // a generator bug
    return ModelGraph{*std::move(graph), std::move(costs_)};
  }

 private:
  struct ForwardOp {
    std::string id;
    OpClass op_class;
    std::vector<std::string> inputs;
    std::string output;
    double flops;
    int64_t moved;
    Saved saved;
  };

  void AddTensor(const std::string& id, int64_t bytes, TensorRole role) {
    TensorSpec spec;
    spec.id = id;
    spec.size_bytes = bytes;
    spec.role_set = true;
    spec.role = role;
    builder_.AddTensor(std::move(spec));
    bytes_[id] = bytes;
    roles_[id] = role;
  }
  void AddOp(OpSpec spec, double seconds) {
    spec.measured_time_seconds = seconds;
    builder_.AddOp(std::move(spec));
    costs_.push_back(seconds);
  }

  GraphBuilder builder_;
  std::map<std::string, int64_t> bytes_;
  std::map<std::string, TensorRole> roles_;
  std::vector<std::string> params_;
  std::vector<ForwardOp> forward_;
  std::vector<double> costs_;
};

constexpr int64_t kFloat = 4;  // fp32 activations

}  // namespace

ModelGraph MakeLstmAttentionGraph(int layers, int steps, int64_t batch,
                                  int64_t hidden) {
  TrainingGraphBuilder b(absl::StrCat("lstm_attention_l", layers, "_t", steps));
  using S = TrainingGraphBuilder::Saved;
  const int64_t vocab = 8192;
  const int64_t state = batch * hidden * kFloat;
  const std::string src_embedding = b.Param("src_emb", vocab * hidden * kFloat);
  const std::string tgt_embedding = b.Param("tgt_emb", vocab * hidden * kFloat);
  std::vector<std::string> enc_w, dec_w;
  for (int l = 0; l < layers; ++l) {
    enc_w.push_back(
        b.Param(absl::StrCat("enc_w", l), 8 * hidden * hidden * kFloat));
    dec_w.push_back(
        b.Param(absl::StrCat("dec_w", l), 8 * hidden * hidden * kFloat));
  }
  const std::string w_s = b.Param("att_ws", hidden * hidden * kFloat);
  const std::string w_q = b.Param("att_wq", hidden * hidden * kFloat);
  const std::string v = b.Param("att_v", hidden * kFloat);
  const std::string w_c = b.Param("att_wc", 2 * hidden * hidden * kFloat);
  const std::string w_o = b.Param("out_w", hidden * vocab * kFloat);
  const std::string h0 = b.Input("h0", state);
  const double gemm_cell = 2.0 * batch * 2 * hidden * 4 * hidden;

  // One LSTM cell; returns {h, c}.
  auto cell = [&](const std::string& prefix, const std::string& x,
                  const std::string& h, const std::string& c,
                  const std::string& w) {
    const std::string xh = b.Forward(prefix + ".concat", OpClass::kDataMovement,
                                     {x, h}, 2 * state, 0, S{false, false});
    const std::string gates = b.Forward(prefix + ".gates", OpClass::kGemm,
                                        {xh, w}, 4 * state, gemm_cell);
    const std::string act =
        b.Forward(prefix + ".act", OpClass::kElementwise, {gates}, 4 * state,
                  4.0 * batch * hidden, S{false, true});
    const std::string c_new = b.Forward(prefix + ".cell", OpClass::kElementwise,
                                        {act, c}, state, 3.0 * batch * hidden);
    const std::string tanh_c =
        b.Forward(prefix + ".tanh", OpClass::kElementwise, {c_new}, state,
                  1.0 * batch * hidden, S{false, true});
    const std::string h_new =
        b.Forward(prefix + ".h", OpClass::kElementwise, {act, tanh_c}, state,
                  1.0 * batch * hidden);
    return std::make_pair(h_new, c_new);
  };

  // Encoder.
  std::vector<std::string> h(layers, h0), c(layers, h0), top;
  for (int t = 0; t < steps; ++t) {
    const std::string token = b.Input(absl::StrCat("src", t), batch * 8);
    std::string x =
        b.Forward(absl::StrCat("enc", t, ".emb"), OpClass::kEmbedding,
                  {token, src_embedding}, state, 0);
    for (int l = 0; l < layers; ++l) {
      std::tie(h[l], c[l]) =
          cell(absl::StrCat("enc", t, ".l", l), x, h[l], c[l], enc_w[l]);
      x = h[l];
    }
    top.push_back(x);
  }
  const int64_t memory_bytes = static_cast<int64_t>(steps) * state;
  const std::string memory = b.Forward("enc.stack", OpClass::kDataMovement, top,
                                       memory_bytes, 0, S{false, false});
  const std::string keys =
      b.Forward("enc.keys", OpClass::kGemm, {memory, w_s}, memory_bytes,
                2.0 * batch * steps * hidden * hidden);
  // Decoder with MLP attention.
  std::vector<std::string> losses;
  for (int t = 0; t < steps; ++t) {
    const std::string prefix = absl::StrCat("dec", t);
    const std::string token = b.Input(absl::StrCat("tgt", t), batch * 8);
    std::string x = b.Forward(prefix + ".emb", OpClass::kEmbedding,
                              {token, tgt_embedding}, state, 0);
    for (int l = 0; l < layers; ++l) {
      std::tie(h[l], c[l]) =
          cell(absl::StrCat(prefix, ".l", l), x, h[l], c[l], dec_w[l]);
      x = h[l];
    }
    const std::string query =
        b.Forward(prefix + ".wq", OpClass::kGemm, {x, w_q}, state,
                  2.0 * batch * hidden * hidden);
    const std::string sum =
        b.Forward(prefix + ".att_add", OpClass::kElementwise, {keys, query},
                  memory_bytes, 1.0 * batch * steps * hidden, S{false, false});
    const std::string energy =
        b.Forward(prefix + ".att_tanh", OpClass::kElementwise, {sum},
                  memory_bytes, 1.0 * batch * steps * hidden, S{false, true});
    const std::string scores =
        b.Forward(prefix + ".att_score", OpClass::kGemm, {energy, v},
                  batch * steps * kFloat, 2.0 * batch * steps * hidden);
    const std::string weights =
        b.Forward(prefix + ".att_softmax", OpClass::kSoftmax, {scores},
                  batch * steps * kFloat, 5.0 * batch * steps, S{false, true});
    const std::string context =
        b.Forward(prefix + ".att_context", OpClass::kGemm, {weights, memory},
                  state, 2.0 * batch * steps * hidden);
    const std::string joined =
        b.Forward(prefix + ".att_concat", OpClass::kDataMovement, {context, x},
                  2 * state, 0, S{false, false});
    const std::string attentional =
        b.Forward(prefix + ".att_out", OpClass::kGemm, {joined, w_c}, state,
                  4.0 * batch * hidden * hidden);
    const std::string attentional_tanh =
        b.Forward(prefix + ".att_out_tanh", OpClass::kElementwise,
                  {attentional}, state, 1.0 * batch * hidden, S{false, true});
    const std::string logits =
        b.Forward(prefix + ".logits", OpClass::kGemm, {attentional_tanh, w_o},
                  batch * vocab * kFloat, 2.0 * batch * hidden * vocab);
    losses.push_back(b.Forward(prefix + ".xent", OpClass::kSoftmax,
                               {logits, token}, kFloat, 5.0 * batch * vocab,
                               S{true, false}));
  }
  const std::string loss = b.Forward("loss", OpClass::kReduction, losses,
                                     kFloat, steps, S{false, false});
  return b.Finish(loss);
}

ModelGraph MakeTransformerGraph(int layers, int64_t batch, int64_t sequence,
                                int64_t hidden, int heads) {
  TrainingGraphBuilder b(absl::StrCat("transformer_l", layers));
  using S = TrainingGraphBuilder::Saved;
  const int64_t half = 2;  // fp16 activations
  const int64_t act = batch * sequence * hidden * half;
  const int64_t scores = batch * heads * sequence * sequence * half;
  const double tokens = static_cast<double>(batch * sequence);
  const double h = static_cast<double>(hidden);
  std::string x = b.Forward("embed", OpClass::kEmbedding,
                            {b.Input("tokens", batch * sequence * 8),
                             b.Param("embedding", 32000 * hidden * half)},
                            act, 0);
  for (int l = 0; l < layers; ++l) {
    const std::string p = absl::StrCat("layer", l);
    auto param = [&](const char* name, int64_t elements) {
      return b.Param(absl::StrCat(p, ".", name), elements * half);
    };
    const std::string ln1 =
        b.Forward(p + ".ln1", OpClass::kNorm, {x, param("ln1", 2 * hidden)},
                  act, 8 * tokens * h);
    const std::string qkv = b.Forward(p + ".qkv", OpClass::kGemm,
                                      {ln1, param("wqkv", 3 * hidden * hidden)},
                                      3 * act, 2 * tokens * h * 3 * h);
    const std::string split =
        b.Forward(p + ".split_heads", OpClass::kDataMovement, {qkv}, 3 * act, 0,
                  S{false, false});
    const std::string logits = b.Forward(p + ".scores", OpClass::kGemm, {split},
                                         scores, 2 * tokens * sequence * h);
    const std::string scaled =
        b.Forward(p + ".scale_mask", OpClass::kElementwise, {logits}, scores,
                  2.0 * scores / half, S{false, false});
    const std::string probs =
        b.Forward(p + ".softmax", OpClass::kSoftmax, {scaled}, scores,
                  5.0 * scores / half, S{false, true});
    const std::string dropped =
        b.Forward(p + ".attn_dropout", OpClass::kRandom, {probs}, scores,
                  1.0 * scores / half, S{false, true}, /*recomputable=*/false);
    const std::string context =
        b.Forward(p + ".context", OpClass::kGemm, {dropped, split}, act,
                  2 * tokens * sequence * h);
    const std::string merged =
        b.Forward(p + ".merge_heads", OpClass::kDataMovement, {context}, act, 0,
                  S{false, false});
    const std::string proj = b.Forward(p + ".proj", OpClass::kGemm,
                                       {merged, param("wo", hidden * hidden)},
                                       act, 2 * tokens * h * h);
    const std::string residual1 =
        b.Forward(p + ".residual1", OpClass::kElementwise, {x, proj}, act,
                  tokens * h, S{false, false});
    const std::string ln2 =
        b.Forward(p + ".ln2", OpClass::kNorm,
                  {residual1, param("ln2", 2 * hidden)}, act, 8 * tokens * h);
    const std::string fc1 = b.Forward(p + ".fc1", OpClass::kGemm,
                                      {ln2, param("w1", 4 * hidden * hidden)},
                                      4 * act, 8 * tokens * h * h);
    const std::string gelu = b.Forward(p + ".gelu", OpClass::kElementwise,
                                       {fc1}, 4 * act, 8 * tokens * 4 * h);
    const std::string fc2 = b.Forward(p + ".fc2", OpClass::kGemm,
                                      {gelu, param("w2", 4 * hidden * hidden)},
                                      act, 8 * tokens * h * h);
    x = b.Forward(p + ".residual2", OpClass::kElementwise, {residual1, fc2},
                  act, tokens * h, S{false, false});
  }
  const std::string logits =
      b.Forward("lm_head", OpClass::kGemm,
                {x, b.Param("lm_head.w", 32000 * hidden * half)},
                batch * sequence * 32000 * half, 2 * tokens * h * 32000);
  const std::string loss = b.Forward("xent", OpClass::kSoftmax, {logits}, 4,
                                     5 * tokens * 32000, S{true, false});
  return b.Finish(loss);
}

// The proto's conversions keep every field: only the marks are new.
v1::Graph BatchMarkedProto(const planner::Graph& graph, int64_t batch) {
  v1::Graph proto = adapter::GraphToProto(graph);
  proto.set_batch_size(batch);
  for (v1::Tensor& tensor : *proto.mutable_tensors()) {
    if (tensor.role() == v1::TENSOR_ROLE_ACTIVATION ||
        tensor.role() == v1::TENSOR_ROLE_INPUT) {
      tensor.set_batch_dim(0);  // shapeless: size proportional to the batch
    }
  }
  return proto;
}

planner::Graph WithBatchMarks(const planner::Graph& graph, int64_t batch) {
  return *adapter::GraphFromProto(BatchMarkedProto(graph, batch));
}

}  // namespace echo::bench
