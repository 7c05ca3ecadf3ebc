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

}  // namespace
}  // namespace echo::planner
