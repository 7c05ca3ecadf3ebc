// The optimizer in the iteration (planner/optimizer_step.h): the state and
// step each optimizer adds, and the peaks of the iteration that has them.
#include "planner/optimizer_step.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/memory_simulator.h"
#include "planner/text_format.h"
#include "test_util.h"

namespace echo::planner {
namespace {

using ::testing::HasSubstr;

// One layer: 1 KiB of input, a 4 KiB weight, its 4 KiB gradient kept to
// the end of the step (an output) as optimizers read it.
constexpr char kLayer[] = R"(
graph layer
tensor x f32[256] input
tensor w f32[1024] parameter
op f fwd gemm x w -> y:f32[256]
op g bwd gemm y x -> gw:f32[1024]
output gw
)";

Graph WithMetadata(const std::string& text,
                   std::map<std::string, std::string> metadata) {
  absl::StatusOr<GraphBuilder> specs = ParseTextGraphSpecs(text);
  EXPECT_TRUE(specs.ok()) << specs.status();
  for (auto& [key, value] : metadata) specs->SetMetadata(key, value);
  absl::StatusOr<Graph> graph = std::move(*specs).Build();
  EXPECT_TRUE(graph.ok()) << graph.status();
  return *std::move(graph);
}

TEST(OptimizerStepTest, NoOptimizerNamedAddsNothing) {
  const Graph graph = WithMetadata(kLayer, {});
  ASSERT_OK_AND_ASSIGN(const std::optional<OptimizerSpec> optimizer,
                       OptimizerOf(graph));
  EXPECT_FALSE(optimizer.has_value());
  EXPECT_FALSE(HasOptimizerStep(graph));
  // x, w, y and gw while g runs.
  EXPECT_EQ(SimulatePlain(graph).peak_bytes, 1024 + 4096 + 1024 + 4096);
}

TEST(OptimizerStepTest, AdamWForeachHoldsTwoMomentsAndASqrtList) {
  const Graph graph = WithMetadata(kLayer, {{kOptimizerKey, "adamw"}});
  ASSERT_OK_AND_ASSIGN(const std::optional<OptimizerSpec> optimizer,
                       OptimizerOf(graph));
  ASSERT_TRUE(optimizer.has_value());
  OptimizerStepSummary added;
  ASSERT_OK_AND_ASSIGN(const Graph iteration,
                       AddOptimizerStep(graph, *optimizer, &added));
  // exp_avg and exp_avg_sq as the weight (f32), and a 4-byte step.
  EXPECT_EQ(added.state_bytes, 2 * 4096 + 4);
  EXPECT_EQ(added.state_tensors, 3);
  EXPECT_EQ(added.temporary_bytes, 4096);
  EXPECT_TRUE(HasOptimizerStep(iteration));
  const SimulationResult plain = SimulatePlain(iteration);
  // At the step: w, gw, the state and the sqrt list; x and y are gone.
  EXPECT_EQ(plain.peak_bytes, 4096 + 4096 + (2 * 4096 + 4) + 4096);
  EXPECT_EQ(iteration.op(plain.peak_op).id, kOptimizerStepOpId);
  EXPECT_EQ(plain.breakdown.optimizer_state_bytes, 2 * 4096 + 4);
}

TEST(OptimizerStepTest, Fp32MomentsBesideBf16WeightsAndOtherImplementations) {
  std::string bf16 = kLayer;
  bf16.replace(bf16.find("w f32[1024]"), 11, "w bf16[1024]");
  const Graph graph =
      WithMetadata(bf16, {{kOptimizerKey, "adam"},
                          {kOptimizerStateDTypeKey, "f32"},
                          {kOptimizerImplementationKey, "fused"}});
  ASSERT_OK_AND_ASSIGN(const std::optional<OptimizerSpec> optimizer,
                       OptimizerOf(graph));
  OptimizerStepSummary added;
  ASSERT_OK_AND_ASSIGN(const Graph iteration,
                       AddOptimizerStep(graph, *optimizer, &added));
  // 8 bytes of fp32 moments per 2-byte weight element; fused: no list.
  EXPECT_EQ(added.state_bytes, 2 * 4096 + 4);
  EXPECT_EQ(added.temporary_bytes, 0);
  for (const auto& [name, states, temporary] :
       std::vector<std::tuple<std::string, int64_t, int64_t>>{
           {"sgd", 0, 0}, {"sgd_momentum", 4096, 0}, {"rmsprop", 4100, 4096}}) {
    const Graph named = WithMetadata(kLayer, {{kOptimizerKey, name}});
    ASSERT_OK_AND_ASSIGN(const std::optional<OptimizerSpec> spec,
                         OptimizerOf(named));
    ASSERT_OK(AddOptimizerStep(named, *spec, &added).status());
    EXPECT_EQ(added.state_bytes, states) << name;
    EXPECT_EQ(added.temporary_bytes, temporary) << name;
  }
}

TEST(OptimizerStepTest, UnknownNamesAreRefusedNamingTheKey) {
  const absl::Status unknown =
      OptimizerOf(WithMetadata(kLayer, {{kOptimizerKey, "lion"}})).status();
  EXPECT_EQ(unknown.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unknown.message(), HasSubstr("'lion'; known: sgd"));
  const absl::Status dtype =
      OptimizerOf(WithMetadata(kLayer, {{kOptimizerKey, "adam"},
                                        {kOptimizerStateDTypeKey, "f31"}}))
          .status();
  EXPECT_THAT(dtype.message(), HasSubstr(kOptimizerStateDTypeKey));
}

// Two layers whose weight gradients are graph outputs, as the hook sends
// them: 1 KiB activations, 4 KiB weights and gradients.
constexpr char kTwoLayers[] = R"(
graph two
tensor x f32[256] input
tensor w1 f32[1024] parameter
tensor w2 f32[1024] parameter
tensor gw1 f32[1024] gradient output
tensor gw2 f32[1024] gradient output
op f1 fwd gemm x w1 -> h:f32[256]
op f2 fwd gemm h w2 -> y:f32[256]
op g2 bwd gemm y h -> gw2
op g1 bwd gemm y x -> gw1
)";

TEST(OptimizerStepTest, HeldGradientsLiveAllIterationAndNewOnesAreAddedIn) {
  const Graph fresh = WithMetadata(kTwoLayers, {{kOptimizerKey, "sgd"}});
  ASSERT_OK_AND_ASSIGN(const std::optional<OptimizerSpec> sgd,
                       OptimizerOf(fresh));
  EXPECT_FALSE(sgd->holds_gradients);
  ASSERT_OK_AND_ASSIGN(const Graph one_batch,
                       AddOptimizerStep(fresh, *sgd, nullptr));
  // Gradients from their op to the step: at g1, x, y, w1, w2, gw2, gw1.
  EXPECT_EQ(SimulatePlain(one_batch).peak_bytes,
            1024 + 1024 + 2 * 4096 + 2 * 4096);

  const Graph held = WithMetadata(
      kTwoLayers,
      {{kOptimizerKey, "sgd"}, {kOptimizerHoldsGradientsKey, "true"}});
  ASSERT_OK_AND_ASSIGN(const std::optional<OptimizerSpec> accumulating,
                       OptimizerOf(held));
  ASSERT_TRUE(accumulating->holds_gradients);
  OptimizerStepSummary added;
  ASSERT_OK_AND_ASSIGN(const Graph iteration,
                       AddOptimizerStep(held, *accumulating, &added));
  EXPECT_EQ(added.held_gradient_bytes, 2 * 4096);
  // Each new gradient is added in right after its op and freed there.
  std::vector<std::string> order;
  for (OpIndex o = 0; o < iteration.num_ops(); ++o) {
    order.push_back(iteration.op(o).id);
  }
  EXPECT_THAT(order, ::testing::ElementsAre(
                         "f1", "f2", "g2", "echo.accumulate_gradient:gw2", "g1",
                         "echo.accumulate_gradient:gw1", kOptimizerStepOpId));
  const SimulationResult plain = SimulatePlain(iteration);
  // At g2: x, h, y, the weights, both held gradients and the new gw2. At
  // g1, 1 KiB less: h is gone, and gw2 is in its held one already.
  EXPECT_EQ(plain.peak_bytes, 3 * 1024 + 2 * 4096 + 2 * 4096 + 4096);
  EXPECT_EQ(iteration.op(plain.peak_op).id, "g2");
  EXPECT_EQ(plain.breakdown.gradient_bytes, 3 * 4096);
  // The held gradients live from the first step on, as accumulation holds
  // them through the forward.
  EXPECT_EQ(SimulatePlain(iteration).persistent_bytes, 2 * 4096);
}

TEST(OptimizerStepTest, HeldGradientsValueMustBeTrueOrFalse) {
  const absl::Status status =
      OptimizerOf(WithMetadata(kLayer, {{kOptimizerKey, "sgd"},
                                        {kOptimizerHoldsGradientsKey, "2"}}))
          .status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("'2'; known: true, false"));
}

// w2's gradient is made before the backward's last read of w2 (dh), so its
// update waits for that read; w1's runs right after its gradient's op.
constexpr char kInBackward[] = R"(
graph two
tensor x f32[256] input
tensor w1 f32[1024] parameter
tensor w2 f32[1024] parameter
tensor gw1 f32[1024] gradient output gradient_of=w1
tensor gw2 f32[1024] gradient output gradient_of=w2
op f1 fwd gemm x w1 -> h:f32[256]
op f2 fwd gemm h w2 -> y:f32[256]
op g2 bwd gemm y h -> gw2
op gh bwd gemm y w2 -> dh:f32[256]
op g1 bwd gemm dh x -> gw1
)";

std::vector<std::string> OpIds(const Graph& graph) {
  std::vector<std::string> ids;
  for (OpIndex o = 0; o < graph.num_ops(); ++o) ids.push_back(graph.op(o).id);
  return ids;
}

TEST(OptimizerStepTest, UpdatesInTheBackwardFreeEachGradientAfterItsLastReads) {
  const Graph graph = WithMetadata(
      kInBackward,
      {{kOptimizerKey, "adamw"}, {kOptimizerUpdateInBackwardKey, "true"}});
  ASSERT_OK_AND_ASSIGN(const std::optional<OptimizerSpec> adamw,
                       OptimizerOf(graph));
  ASSERT_TRUE(adamw->update_in_backward);
  constexpr int64_t kState = 2 * (2 * 4096 + 4);  // both parameters'
  OptimizerStepSummary added;
  ASSERT_OK_AND_ASSIGN(const Graph iteration,
                       AddOptimizerStep(graph, *adamw, &added));
  EXPECT_THAT(OpIds(iteration),
              ::testing::ElementsAre(
                  "f1", "f2", "g2", "gh", "echo.update_in_backward:gw2", "g1",
                  "echo.update_in_backward:gw1", kOptimizerStepOpId));
  EXPECT_EQ(added.updated_in_backward, 2);
  EXPECT_EQ(added.gradients, 2);
  // The step at the end: weights, both gradients, the state and the
  // foreach sqrt list of both.
  EXPECT_EQ(added.at_end_peak_bytes, 2 * 4096 + 2 * 4096 + kState + 2 * 4096);
  // At gw2's update: x, dh, gw2, the weights, the state and one sqrt.
  EXPECT_EQ(added.in_backward_peak_bytes,
            1024 + 1024 + 4096 + 2 * 4096 + kState + 4096);
  const SimulationResult plain = SimulatePlain(iteration);
  EXPECT_EQ(plain.peak_bytes, added.in_backward_peak_bytes);
  EXPECT_EQ(iteration.op(plain.peak_op).id, "echo.update_in_backward:gw2");
  // Nothing is left for the step's temporaries.
  EXPECT_EQ(added.temporary_bytes, 0);
  EXPECT_FALSE(iteration.tensor(iteration.FindTensor("gw1")).is_output);
}

TEST(OptimizerStepTest, NoUpdateInTheBackwardWhereItWouldRaiseThePeak) {
  // gw's update would run while x and y wait for h, its sqrt on top: the
  // step at the end peaks lower.
  const Graph graph = WithMetadata(
      R"(
graph late
tensor x f32[4096] input
tensor w f32[1024] parameter
tensor gw f32[1024] gradient output gradient_of=w
op f fwd gemm x w -> y:f32[4096]
op g bwd gemm y x -> gw
op h bwd gemm y x -> z:f32[1]
output z
)",
      {{kOptimizerKey, "adam"}, {kOptimizerUpdateInBackwardKey, "true"}});
  ASSERT_OK_AND_ASSIGN(const std::optional<OptimizerSpec> adam,
                       OptimizerOf(graph));
  OptimizerStepSummary added;
  ASSERT_OK_AND_ASSIGN(const Graph iteration,
                       AddOptimizerStep(graph, *adam, &added));
  EXPECT_EQ(added.updated_in_backward, 0);
  EXPECT_EQ(added.at_end_peak_bytes, 2 * 16384 + 4 + 4096 + 4096 + 8196);
  EXPECT_EQ(added.in_backward_peak_bytes, 2 * 16384 + 4096 * 3 + 8196);
  EXPECT_THAT(OpIds(iteration),
              ::testing::ElementsAre("f", "g", "h", kOptimizerStepOpId));
}

TEST(OptimizerStepTest, UpdateInTheBackwardIsRefusedWithHeldGradients) {
  const absl::Status status =
      OptimizerOf(
          WithMetadata(kInBackward, {{kOptimizerKey, "sgd"},
                                     {kOptimizerHoldsGradientsKey, "true"},
                                     {kOptimizerUpdateInBackwardKey, "true"}}))
          .status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("needs one backward per step"));
}

TEST(OptimizerStepTest, GradientOfMustNameAParameterFromAGradient) {
  const auto error = [](const std::string& text) {
    return std::string(ParseTextGraph(text).status().message());
  };
  EXPECT_THAT(error("tensor x f32[4] input\ntensor g f32[4] gradient output "
                    "gradient_of=x\nop f bwd other x -> g\n"),
              HasSubstr("tensor 'g': gradient_of names 'x', which is not a "
                        "PARAMETER tensor"));
  EXPECT_THAT(error("tensor w f32[4] parameter\ntensor g f32[4] gradient "
                    "output gradient_of=v\nop f bwd other w -> g\n"),
              HasSubstr("which is not a tensor of the graph"));
  EXPECT_THAT(error("tensor w f32[4] parameter\ntensor g f32[4] output "
                    "gradient_of=w\nop f bwd other w -> g\n"),
              HasSubstr("has gradient_of but its role is not GRADIENT"));
}

TEST(OptimizerStepTest, OnlyParametersAGradientNamesGetState) {
  // w2 is frozen: no gradient names it, so AdamW makes it no state.
  const Graph graph = WithMetadata(R"(
graph frozen
tensor x f32[256] input
tensor w1 f32[1024] parameter
tensor w2 f32[2048] parameter
tensor gw1 f32[1024] gradient output gradient_of=w1
op f1 fwd gemm x w1 -> h:f32[256]
op f2 fwd gemm h w2 -> y:f32[256]
op g1 bwd gemm y x -> gw1
)",
                                   {{kOptimizerKey, "adamw"}});
  ASSERT_OK_AND_ASSIGN(const std::optional<OptimizerSpec> adamw,
                       OptimizerOf(graph));
  OptimizerStepSummary added;
  ASSERT_OK_AND_ASSIGN(const Graph iteration,
                       AddOptimizerStep(graph, *adamw, &added));
  EXPECT_EQ(added.state_bytes, 2 * 4096 + 4);
  EXPECT_EQ(added.state_tensors, 3);
  EXPECT_EQ(added.temporary_bytes, 4096);
  EXPECT_LT(iteration.FindTensor("w2.state0"), 0);
  EXPECT_GE(iteration.FindTensor("w1.state0"), 0);
}

TEST(OptimizerStepTest, AGradientThatNamesNoParameterCouldBeAnyones) {
  // g is the gradient of both w1 and w2 (w1 + w2 in the forward): it names
  // neither, so the graph does not say which parameters train, and all do.
  const Graph graph = WithMetadata(R"(
graph shared
tensor w1 f32[1024] parameter
tensor w2 f32[1024] parameter
tensor w3 f32[1024] parameter
tensor g3 f32[1024] gradient output gradient_of=w3
tensor g f32[1024] gradient output
op f fwd elementwise w1 w2 w3 -> y:f32[1024]
op b bwd elementwise y -> g g3
)",
                                   {{kOptimizerKey, "sgd_momentum"}});
  ASSERT_OK_AND_ASSIGN(const std::optional<OptimizerSpec> sgd,
                       OptimizerOf(graph));
  OptimizerStepSummary added;
  ASSERT_OK_AND_ASSIGN(const Graph iteration,
                       AddOptimizerStep(graph, *sgd, &added));
  EXPECT_EQ(added.state_bytes, 3 * 4096);
}

}  // namespace
}  // namespace echo::planner
