#include "random_graphs.h"

#include <map>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"

namespace echo::testing {

using planner::GraphBuilder;
using planner::OpClass;
using planner::OpSpec;
using planner::Phase;
using planner::TensorRole;
using planner::TensorSpec;

RandomGraph MakeRandomTrainingGraph(uint64_t seed,
                                    const RandomGraphOptions& options) {
  std::mt19937_64 rng(seed);
  auto chance = [&rng](double p) {
    return std::uniform_real_distribution<double>(0, 1)(rng) < p;
  };
  auto uniform = [&rng](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  GraphBuilder builder(absl::StrCat("random_", seed));
  std::vector<double> costs;
  auto add_tensor = [&](const std::string& id, int64_t bytes, TensorRole role,
                        bool is_output = false) {
    TensorSpec spec;
    spec.id = id;
    spec.size_bytes = bytes;
    spec.role_set = true;
    spec.role = role;
    spec.is_output = is_output;
    builder.AddTensor(std::move(spec));
  };
  auto add_op = [&](OpSpec spec, double cost) {
    costs.push_back(cost);
    builder.AddOp(std::move(spec));
  };
  auto bytes = [&] { return uniform(options.min_bytes, options.max_bytes); };

  add_tensor("x", bytes(), TensorRole::kInput);
  struct ForwardOp {
    std::string id;
    std::vector<std::string> activation_inputs;
    std::vector<std::string> outputs;
    std::string parameter;  // empty when none
    bool reads_output = false;
    std::vector<bool> reads_input;
  };
  std::vector<ForwardOp> forward;
  std::vector<std::string> activations = {"x"};
  static constexpr OpClass kClasses[] = {
      OpClass::kGemm,        OpClass::kConv,         OpClass::kElementwise,
      OpClass::kElementwise, OpClass::kNorm,         OpClass::kReduction,
      OpClass::kSoftmax,     OpClass::kDataMovement, OpClass::kRandom,
      OpClass::kElementwise};
  for (int i = 0; i < options.forward_ops; ++i) {
    ForwardOp f;
    f.id = absl::StrCat("f", i);
    OpSpec spec;
    spec.id = f.id;
    spec.phase = Phase::kForward;
    spec.op_class = kClasses[uniform(0, std::size(kClasses) - 1)];
    f.activation_inputs.push_back(activations.back());
    if (activations.size() > 2 && chance(options.skip_probability)) {
      f.activation_inputs.push_back(
          activations[uniform(0, activations.size() - 2)]);
    }
    spec.input_ids = f.activation_inputs;
    double cost = 0.1 + uniform(0, 20) / 10.0;
    if (spec.op_class == OpClass::kGemm || spec.op_class == OpClass::kConv) {
      f.parameter = absl::StrCat("w", i);
      add_tensor(f.parameter, bytes(), TensorRole::kParameter);
      spec.input_ids.push_back(f.parameter);
      cost = 5 + uniform(0, 50);
    }
    const int num_outputs = chance(options.two_outputs_probability) ? 2 : 1;
    for (int k = 0; k < num_outputs; ++k) {
      const std::string out = absl::StrCat("a", i, k == 0 ? "" : "_aux");
      add_tensor(out, bytes(), TensorRole::kActivation);
      f.outputs.push_back(out);
      spec.output_ids.push_back(out);
    }
    if (chance(options.non_recomputable_probability)) {
      spec.recomputable_set = true;
      spec.recomputable = false;
    }
    if (chance(options.workspace_probability)) {
      spec.workspace_bytes = bytes();
    }
    f.reads_output = chance(0.5);
    for (size_t k = 0; k < f.activation_inputs.size(); ++k) {
      f.reads_input.push_back(chance(0.6));
    }
    activations.push_back(f.outputs.front());
    add_op(std::move(spec), cost);
    forward.push_back(std::move(f));
  }
  add_tensor("loss", 4, TensorRole::kActivation, /*is_output=*/true);
  {
    OpSpec loss;
    loss.id = "loss_op";
    loss.op_class = OpClass::kReduction;
    loss.input_ids = {activations.back()};
    loss.output_ids = {"loss"};
    add_op(std::move(loss), 1);
  }

  // Backward in reverse: gradient contributions per activation, summed by an
  // accumulation op when there are several.
  std::map<std::string, std::vector<std::string>> contributions;
  contributions[activations.back()].push_back("loss");
  int accumulations = 0;
  std::vector<std::pair<std::string, std::string>> parameter_grads;
  for (int i = options.forward_ops - 1; i >= 0; --i) {
    const ForwardOp& f = forward[i];
    const std::string& out = f.outputs.front();
    std::vector<std::string>& grads = contributions[out];
    if (grads.empty()) continue;  // unused output: no gradient
    std::string grad = grads.front();
    if (grads.size() > 1) {
      grad = absl::StrCat("acc", accumulations++);
      add_tensor(grad, bytes(), TensorRole::kActivation);
      OpSpec acc;
      acc.id = absl::StrCat(grad, "_op");
      acc.phase = Phase::kBackward;
      acc.op_class = OpClass::kElementwise;
      acc.input_ids = grads;
      acc.output_ids = {grad};
      add_op(std::move(acc), 0.5);
    }
    OpSpec spec;
    spec.id = absl::StrCat("b", i);
    spec.phase = Phase::kBackward;
    spec.op_class = OpClass::kOther;
    spec.input_ids = {grad};
    if (f.reads_output) spec.input_ids.push_back(out);
    for (const std::string& aux : f.outputs) {
      if (aux != out) spec.input_ids.push_back(aux);
    }
    for (size_t k = 0; k < f.activation_inputs.size(); ++k) {
      if (f.reads_input[k]) spec.input_ids.push_back(f.activation_inputs[k]);
    }
    if (!f.parameter.empty()) spec.input_ids.push_back(f.parameter);
    for (size_t k = 0; k < f.activation_inputs.size(); ++k) {
      const std::string& input = f.activation_inputs[k];
      if (input == "x") continue;
      const std::string g = absl::StrCat("g", i, "_", k);
      add_tensor(g, bytes(), TensorRole::kActivation);
      spec.output_ids.push_back(g);
      contributions[input].push_back(g);
    }
    if (!f.parameter.empty()) {
      const std::string g = absl::StrCat("g", f.parameter);
      add_tensor(g, bytes(), TensorRole::kGradient);
      spec.output_ids.push_back(g);
      parameter_grads.push_back({f.parameter, g});
    }
    if (spec.output_ids.empty()) {
      const std::string g = absl::StrCat("g", i, "_x");
      add_tensor(g, bytes(), TensorRole::kActivation);
      spec.output_ids.push_back(g);
    }
    const double cost = 0.2 + uniform(0, 40) / 10.0;
    add_op(std::move(spec), cost);
  }
  for (const auto& [parameter, grad] : parameter_grads) {
    const std::string updated = absl::StrCat(parameter, "_new");
    add_tensor(updated, 1, TensorRole::kParameter);
    OpSpec update;
    update.id = absl::StrCat("update_", parameter);
    update.phase = Phase::kOptimizer;
    update.op_class = OpClass::kElementwise;
    update.input_ids = {parameter, grad};
    update.output_ids = {updated};
    add_op(std::move(update), 0.1);
  }
  absl::StatusOr<planner::Graph> graph = std::move(builder).Build();
  if (!graph.ok()) {
    // A generator bug; make it loud in every test that uses it.
    abort();
  }
  return RandomGraph{*std::move(graph), std::move(costs)};
}

}  // namespace echo::testing
