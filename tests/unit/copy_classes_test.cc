// Copy classes (planner/recompute/search/copy_classes.h) on graphs of
// identical layers, and AUTO's batch-mode greedy, which tries one copy's
// move on the others, on such a graph large enough to run it.
#include "planner/recompute/search/copy_classes.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "planner/compose/plan_composer.h"
#include "planner/memory_simulator.h"
#include "planner/recompute/search/recompute_search.h"
#include "planner/text_format.h"
#include "test_util.h"

namespace echo::planner {
namespace {

// `layers` identical blocks (gemm, activation, dropout-sized narrowing) and
// their backward, with a loss; `odd_layer` (if >= 0) has a wider gemm.
std::string LayeredGraphText(int layers, int odd_layer = -1) {
  std::string text = "graph layered\ntensor x 2048 input\n";
  std::string input = "x";
  for (int i = 0; i < layers; ++i) {
    const int h_bytes = i == odd_layer ? 8192 : 4096;
    absl::StrAppendFormat(
        &text,
        "tensor w%d 4096 parameter\n"
        "op mm%d fwd gemm %s w%d -> h%d:%d cost=4\n"
        "op act%d fwd elementwise h%d -> a%d:4096 cost=1\n"
        "op narrow%d fwd elementwise a%d -> d%d:2048 cost=1\n",
        i, i, input, i, i, h_bytes, i, i, i, i, i, i);
    input = absl::StrFormat("d%d", i);
  }
  absl::StrAppendFormat(&text,
                        "op loss fwd reduction %s -> l:4 cost=1\n"
                        "op loss_bw bwd elementwise l %s -> g%d:2048 cost=1\n",
                        input, input, layers);
  for (int i = layers - 1; i >= 0; --i) {
    const std::string layer_input =
        i == 0 ? std::string("x") : absl::StrFormat("d%d", i - 1);
    absl::StrAppendFormat(
        &text,
        "op narrow_bw%d bwd elementwise g%d a%d -> ga%d:4096 cost=1\n"
        "op act_bw%d bwd elementwise ga%d h%d -> gh%d:4096 cost=1\n"
        "op mm_bw%d bwd gemm gh%d %s w%d -> g%d:2048 gw%d:4096 cost=8\n"
        "output gw%d\n",
        i, i + 1, i, i, i, i, i, i, i, i, layer_input, i, i, i, i);
  }
  return text;
}

Graph LayeredGraph(int layers, int odd_layer = -1) {
  return testing::ValueOrFail(
      ParseTextGraph(LayeredGraphText(layers, odd_layer)));
}

std::vector<double> Costs(const Graph& graph) {
  std::vector<double> costs;
  for (OpIndex o = 0; o < graph.num_ops(); ++o) {
    costs.push_back(graph.op(o).relative_cost);
  }
  return costs;
}

int32_t ClassOf(const Graph& graph, const std::vector<int32_t>& classes,
                const std::string& id) {
  for (OpIndex o = 0; o < graph.num_ops(); ++o) {
    if (graph.op(o).id == id) return classes[o];
  }
  ADD_FAILURE() << "no op " << id;
  return -1;
}

TEST(CopyClassesTest, LayersAwayFromTheEndsShareClasses) {
  const Graph graph = LayeredGraph(16);
  const std::vector<double> costs = Costs(graph);
  const RecomputeProblem problem(graph, costs, MemoryModelOptions{});
  const std::vector<int32_t> classes = CopyClasses(problem, 4);
  // Four rounds see four edges out: layers 3..12's ops look alike.
  for (const char* op : {"mm", "act", "narrow", "mm_bw", "act_bw"}) {
    const int32_t middle = ClassOf(graph, classes, absl::StrCat(op, 8));
    for (int i = 3; i <= 12; ++i) {
      EXPECT_EQ(ClassOf(graph, classes, absl::StrCat(op, i)), middle)
          << op << i;
    }
    // The first layer reads the graph input: its ops differ.
    EXPECT_NE(ClassOf(graph, classes, absl::StrCat(op, 0)), middle) << op;
  }
  EXPECT_NE(ClassOf(graph, classes, "mm8"), ClassOf(graph, classes, "act8"));
  // No rounds: the ops' own looks, so the first layer's join the rest.
  const std::vector<int32_t> own = CopyClasses(problem, 0);
  EXPECT_EQ(ClassOf(graph, own, "act0"), ClassOf(graph, own, "act8"));
}

TEST(CopyClassesTest, ADifferentLayerAndItsNeighboursSplitOff) {
  const Graph graph = LayeredGraph(16, /*odd_layer=*/8);
  const std::vector<double> costs = Costs(graph);
  const RecomputeProblem problem(graph, costs, MemoryModelOptions{});
  const std::vector<int32_t> classes = CopyClasses(problem, 4);
  // mm8 makes more bytes; act8 reads them; act9, one more edge away, too.
  EXPECT_NE(ClassOf(graph, classes, "mm8"), ClassOf(graph, classes, "mm5"));
  EXPECT_NE(ClassOf(graph, classes, "act8"), ClassOf(graph, classes, "act5"));
  EXPECT_NE(ClassOf(graph, classes, "act9"), ClassOf(graph, classes, "act5"));
  EXPECT_EQ(ClassOf(graph, classes, "act4"), ClassOf(graph, classes, "act5"));
  // A different cost splits an op off too.
  std::vector<double> other = costs;
  for (OpIndex o = 0; o < graph.num_ops(); ++o) {
    if (graph.op(o).id == "act12") other[o] = 2;
  }
  const RecomputeProblem priced(graph, other, MemoryModelOptions{});
  const std::vector<int32_t> repriced = CopyClasses(priced, 4);
  EXPECT_NE(ClassOf(graph, repriced, "act12"),
            ClassOf(graph, repriced, "act5"));
}

// The greedy with copy classes weighs one copy and applies its move on the
// others: at a 20% budget on 140 layers it applies moves on copies and ends
// with the peak the state claims equal to the replay's, lower than plain.
TEST(CopyClassesTest, TheGreedyAppliesMovesOnCopies) {
  const Graph graph = LayeredGraph(140);
  const std::vector<double> costs = Costs(graph);
  const RecomputeProblem problem(graph, costs, MemoryModelOptions{});
  ASSERT_TRUE(SearchesInBatches(problem));
  const std::vector<int32_t> classes = CopyClasses(problem);
  RecomputeSearch search(problem, /*max_depth=*/16, &classes);
  SearchGoal goal;
  goal.limit_mode = false;
  goal.budget = 0.2 * problem.baseline_cost;
  const int64_t plain = search.state().Peak();
  search.Greedy(goal);
  search.RewindToBest();
  EXPECT_GT(search.copies_applied(), 100);
  EXPECT_LT(search.state().Peak(), plain);
  EXPECT_LE(search.state().cost(), goal.budget * (1 + 1e-9));
  const Schedule schedule =
      ScheduleFromRecomputeChoice(problem, search.state().plan());
  absl::StatusOr<SimulationResult> replay =
      ReplaySchedule(graph, schedule, MemoryModelOptions{});
  ASSERT_TRUE(replay.ok()) << replay.status();
  EXPECT_GE(replay->peak_bytes, search.state().MainSlotMax());
  EXPECT_LE(replay->peak_bytes, search.state().Peak());
  // Without classes the same greedy applies none.
  RecomputeSearch exact(problem, /*max_depth=*/16);
  exact.Greedy(goal);
  EXPECT_EQ(exact.copies_applied(), 0);
}

// 140 layers (over 600 ops): AUTO's greedy runs in batch mode, moves tried
// on copies. Its plans replay to the numbers they claim, keep the budget
// and the limits, and do as well as ECHO and CHEN_SQRT at their budgets.
TEST(CopyClassesTest, BatchSearchOnIdenticalLayers) {
  const Graph graph = LayeredGraph(140, /*odd_layer=*/70);
  ASSERT_GT(graph.num_ops(), 600);
  const std::vector<double> costs = Costs(graph);
  const int64_t plain = SimulatePlain(graph, MemoryModelOptions{}).peak_bytes;
  auto plan = [&](RecomputePolicy policy, std::optional<int64_t> limit,
                  std::optional<double> ratio) {
    RecomputePlanOptions options;
    options.policy = policy;
    options.memory_limit_bytes = limit;
    options.max_overhead_ratio = ratio;
    RecomputePlan result =
        testing::ValueOrFail(GenerateRecomputePlan(graph, costs, options));
    absl::StatusOr<SimulationResult> replay =
        ReplaySchedule(graph, result.schedule, MemoryModelOptions{});
    EXPECT_TRUE(replay.ok()) << replay.status();
    if (replay.ok()) {
      EXPECT_EQ(result.planned_peak_bytes, replay->peak_bytes);
    }
    return result;
  };
  for (double ratio : {0.05, 0.2, 0.5}) {
    const RecomputePlan result =
        plan(RecomputePolicy::kAuto, std::nullopt, ratio);
    EXPECT_LE(result.recompute_overhead_ratio, ratio + 1e-9);
    EXPECT_LT(result.planned_peak_bytes, plain) << ratio;
  }
  for (double fraction : {0.8, 0.7, 0.6}) {
    const int64_t limit = static_cast<int64_t>(fraction * plain);
    const RecomputePlan result =
        plan(RecomputePolicy::kAuto, limit, std::nullopt);
    EXPECT_EQ(result.feasible, result.planned_peak_bytes <= limit);
    EXPECT_TRUE(result.feasible) << fraction;
  }
  for (RecomputePolicy policy :
       {RecomputePolicy::kEcho, RecomputePolicy::kChenSqrt}) {
    const RecomputePlan other = plan(policy, std::nullopt, std::nullopt);
    const RecomputePlan same_cost = plan(RecomputePolicy::kAuto, std::nullopt,
                                         other.recompute_overhead_ratio);
    EXPECT_LE(same_cost.planned_peak_bytes, other.planned_peak_bytes);
  }
}

}  // namespace
}  // namespace echo::planner
