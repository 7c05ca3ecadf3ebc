// Chunked execution of row-independent regions (planner/chunk/): which loss
// regions are found, the chunked graph's exact peaks, and AUTO's choice.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/chunk/chunk_rewrite.h"
#include "planner/chunk/chunk_search.h"
#include "planner/compose/plan_composer.h"
#include "planner/memory_simulator.h"
#include "test_util.h"

namespace echo::planner {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// A language model's output projection, log-softmax and NLL loss and their
// backward, as the PyTorch hook captures them (8 rows, 4 features, 16
// classes), between a layer before and its backward.
constexpr char kLmHead[] = R"(
graph lm_head
tensor x f32[8,4] input
tensor w f32[16,4] parameter
tensor tgt i64[8] input
tensor g f32[] input
op ln fwd elementwise x -> h:f32[8,4] cost=1
op t1 fwd data_movement w -> wt:view(f32[4,16]) type=aten::t args=% cost=0
op mm fwd gemm h wt w -> logits:f32[8,16] type=aten::mm args=%,% cost=8
op lsm fwd softmax logits -> lp:f32[8,16] type=aten::_log_softmax args=%,1,False cost=1
op nll fwd reduction lp tgt -> loss:f32[] tw:f32[] type=aten::nll_loss_forward args=%,%,None,1,-100 cost=1
op nllb bwd reduction g lp tgt tw -> gl:f32[8,16] type=aten::nll_loss_backward args=%,%,%,None,1,-100,% cost=1
op lsmb bwd softmax gl lp -> glog:f32[8,16] type=aten::_log_softmax_backward_data args=%,%,1,torch.float32 cost=1
op tg bwd data_movement glog -> glt:view(f32[16,8]) type=aten::t args=% cost=0
op mmw bwd gemm glt h -> gw:f32[16,4] type=aten::mm args=%,% cost=8
op t2 bwd data_movement wt -> wtt:view(f32[16,4]) type=aten::t args=% cost=0
op mmh bwd gemm glog wtt -> gh:f32[8,4] type=aten::mm args=%,% cost=8
op lnb bwd elementwise gh x -> gx:f32[8,4] cost=1
output loss gw gx
)";

std::vector<std::string> OpIds(const Graph& graph,
                               const std::vector<OpIndex>& ops) {
  std::vector<std::string> ids;
  for (OpIndex o : ops) ids.push_back(graph.op(o).id);
  return ids;
}

std::vector<std::string> TensorIds(const Graph& graph,
                                   const std::vector<TensorIndex>& tensors) {
  std::vector<std::string> ids;
  for (TensorIndex t : tensors) ids.push_back(graph.tensor(t).id);
  return ids;
}

// The graph's one chunkable region, or a failure that says how many were
// found and why the others were refused.
::testing::AssertionResult OneRegion(const Graph& graph, ChunkRegion* region) {
  const ChunkRegionSearch found = FindChunkRegions(graph);
  if (found.regions.size() != 1) {
    return ::testing::AssertionFailure()
           << found.regions.size()
           << " regions; refused: " << ::testing::PrintToString(found.rejected);
  }
  *region = found.regions[0];
  return ::testing::AssertionSuccess();
}

TEST(ChunkRegionTest, FindsTheLossAndItsBackward) {
  const Graph graph = testing::ParseOrFail(kLmHead);
  ChunkRegion region;
  ASSERT_TRUE(OneRegion(graph, &region));
  EXPECT_EQ(region.rows, 8);
  EXPECT_THAT(OpIds(graph, region.forward_ops),
              ElementsAre("mm", "lsm", "nll"));
  // t2 is a view of the projection made in the backward: it joins.
  EXPECT_THAT(OpIds(graph, region.backward_ops),
              ElementsAre("nllb", "lsmb", "tg", "mmw", "t2", "mmh"));
  EXPECT_THAT(TensorIds(graph, region.gradients), ElementsAre("gw", "gh"));
  EXPECT_THAT(TensorIds(graph, region.loss_outputs), ElementsAre("loss"));
  EXPECT_EQ(graph.tensor(region.loss_gradient).id, "g");
  EXPECT_THAT(TensorIds(graph, region.inputs),
              ::testing::UnorderedElementsAre("h", "wt", "w", "tgt"));
  // The projection is read whole, the rows and their targets a slice at a
  // time.
  EXPECT_THAT(TensorIds(graph, region.sliced_inputs),
              ::testing::UnorderedElementsAre("h", "tgt"));
  // logits, lp, gl, glog (512 each) and tw (4); the views take nothing.
  EXPECT_EQ(region.inner_bytes, 4 * 512 + 4);
}

TEST(ChunkRegionTest, OneChunkHoldsItsShareOfTheInnerTensors) {
  const Graph graph = testing::ParseOrFail(kLmHead);
  const ChunkRegion region = FindChunkRegions(graph).regions.at(0);
  // The most at once is lp, gl and glog while the log-softmax's backward
  // runs: 3 x 512 bytes whole, 3 x 256 in halves, 3 x 64 per row.
  EXPECT_EQ(*ChunkWorkspaceBytes(graph, region, 8, {}), 1536);
  EXPECT_EQ(*ChunkWorkspaceBytes(graph, region, 4, {}), 768);
  EXPECT_EQ(*ChunkWorkspaceBytes(graph, region, 1, {}), 192);
}

TEST(ChunkRewriteTest, ChunkedGraphPeaksExactly) {
  const Graph graph = testing::ParseOrFail(kLmHead);
  // Plain: w, x, tgt, g, h, lp, gl and the new glog at the log-softmax's
  // backward: 256 + 128 + 64 + 4 + 128 + 512 + 512 + 4 (loss) + 512 - 68
  // freed after the NLL's backward (tgt, g) = 2052.
  EXPECT_EQ(SimulatePlain(graph).peak_bytes, 2052);
  const ChunkRegionSearch found = FindChunkRegions(graph);
  const std::vector<double> costs = testing::RelativeCosts(graph);
  // Forward step: 580 live (w, x, tgt, g, h) + loss 4 + gw (256) and gh
  // (128) at the loss's gradient 1 + one chunk's workspace.
  for (const auto& [chunks, peak] :
       std::vector<std::pair<int32_t, int64_t>>{{2, 1736}, {4, 1352}}) {
    ASSERT_OK_AND_ASSIGN(ChunkedGraph chunked,
                         ChunkGraph(graph, costs, found.regions, chunks, {},
                                    /*launch_cost=*/0.5));
    const SimulationResult plain = SimulatePlain(chunked.graph);
    EXPECT_EQ(plain.peak_bytes, peak) << chunks << " chunks";
    EXPECT_EQ(chunked.graph.op(plain.peak_op).op_type, kChunkedForwardOpType);
    // 7 of the region's 9 ops run kernels; each extra chunk launches them
    // again, and the backward step scales 2 gradients.
    EXPECT_DOUBLE_EQ(chunked.extra_cost, (chunks - 1) * 7 * 0.5 + 2 * 0.5);
  }
  ASSERT_OK_AND_ASSIGN(ChunkedGraph rows,
                       ChunkGraph(graph, costs, found.regions, 8, {}, 0));
  EXPECT_THAT(OpIds(rows.graph, PlainSchedule(rows.graph).empty()
                                    ? std::vector<OpIndex>{}
                                    : std::vector<OpIndex>{0, 1, 2, 3, 4}),
              ElementsAre("ln", "t1", "chunked_nll.forward",
                          "chunked_nll.backward", "lnb"));
  // One row at a time: the forward step holds 580 + 388 + 192; the
  // backward step scales gw and gh in place (w, x, g, gw, gh, loss: 776).
  const SimulationResult by_rows = SimulatePlain(rows.graph);
  EXPECT_EQ(by_rows.peak_bytes, 1160);
  EXPECT_EQ(by_rows.step_bytes[3], 776);
  // Costs move with their ops: the region's 30 stay 30 at no launch cost.
  double total = 0;
  for (double c : rows.op_costs) total += c;
  EXPECT_DOUBLE_EQ(total, 30);
}

TEST(ChunkRegionTest, LeavesAlonePerRowLossesAndUnknownArguments) {
  std::string none = kLmHead;
  none.replace(none.find("None,1,-100 cost=1"), 18, "None,0,-100 cost=1");
  EXPECT_THAT(FindChunkRegions(testing::ParseOrFail(none)).regions, IsEmpty());
  std::string bare = kLmHead;
  bare.replace(bare.find(" args=%,%,None,1,-100 "), 22, " ");
  const ChunkRegionSearch found = FindChunkRegions(testing::ParseOrFail(bare));
  EXPECT_THAT(found.regions, IsEmpty());
  ASSERT_EQ(found.rejected.size(), 1u);
  EXPECT_THAT(found.rejected[0], HasSubstr("reduction is not mean or sum"));
}

// kLmHead with as many rows as classes (16 x 16 logits: batch x length
// = vocabulary), where the shape of the logits' transposed gradient reads
// as rows first. It once sent the region builder past the graph's inputs
// (issue 49: echod crashed).
std::string SquareLmHead() {
  std::string square = kLmHead;
  for (const auto& [from, to] :
       std::vector<std::pair<std::string, std::string>>{
           {"x f32[8,4]", "x f32[16,4]"},
           {"tgt i64[8]", "tgt i64[16]"},
           {"h:f32[8,4]", "h:f32[16,4]"},
           {"logits:f32[8,16]", "logits:f32[16,16]"},
           {"lp:f32[8,16]", "lp:f32[16,16]"},
           {"gl:f32[8,16]", "gl:f32[16,16]"},
           {"glog:f32[8,16]", "glog:f32[16,16]"},
           {"glt:view(f32[16,8])", "glt:view(f32[16,16])"},
           {"gh:f32[8,4]", "gh:f32[16,4]"},
           {"gx:f32[8,4]", "gx:f32[16,4]"}}) {
    const size_t at = square.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    square.replace(at, from.size(), to);
  }
  return square;
}

TEST(ChunkRegionTest, RowsEqualToClassesTellTheTransposeApart) {
  const Graph graph = testing::ParseOrFail(SquareLmHead());
  ChunkRegion region;
  ASSERT_TRUE(OneRegion(graph, &region));
  EXPECT_EQ(region.rows, 16);
  // The same region as at 8 rows: the transpose is rows last, so the
  // weight's gradient is summed over the chunks, not handed on by rows.
  EXPECT_THAT(OpIds(graph, region.backward_ops),
              ElementsAre("nllb", "lsmb", "tg", "mmw", "t2", "mmh"));
  EXPECT_THAT(TensorIds(graph, region.gradients), ElementsAre("gw", "gh"));
  EXPECT_THAT(TensorIds(graph, region.summed), ElementsAre("gw"));
  EXPECT_THAT(TensorIds(graph, region.rows_last), ElementsAre("glt"));
  // A chunk of 4 rows holds lp, gl and glog at 4 x 16 floats each.
  EXPECT_EQ(*ChunkWorkspaceBytes(graph, region, 4, {}), 3 * 256);
}

TEST(ChunkRegionTest, AGradientViewingAGraphInputIsRefusedNotFollowed) {
  // The logits' gradient joins a gradient sent from outside (as Hugging
  // Face's unused logits' gradient is added in), and the sum, a view of
  // that input's storage, leaves by rows: the region cannot hand on
  // storage it does not make.
  std::string text = SquareLmHead();
  text.replace(text.find("output loss gw gx"), 17,
               "tensor gz f32[16,16] input\n"
               "op add bwd elementwise gz glog -> ga:view(f32[16,16]) "
               "type=aten::add args=%,% cost=0\n"
               "op out bwd other ga -> go:f32[16] type=aten::amax args=%,[1] "
               "cost=1\n"
               "output loss gw gx go");
  const ChunkRegionSearch found = FindChunkRegions(testing::ParseOrFail(text));
  EXPECT_THAT(found.regions, IsEmpty());
  ASSERT_EQ(found.rejected.size(), 1u);
  EXPECT_THAT(found.rejected[0],
              HasSubstr("gradient 'ga' is a view of 'gz', which the region "
                        "does not make"));
}

TEST(ChunkRegionTest, ReturnedLogitsLeaveTheProjectionOut) {
  // The logits are also a graph output: the region starts below them.
  std::string returned = kLmHead;
  returned.replace(returned.find("output loss gw gx"), 17,
                   "output loss gw gx logits");
  const Graph graph = testing::ParseOrFail(returned);
  const ChunkRegionSearch found = FindChunkRegions(graph);
  ASSERT_EQ(found.regions.size(), 1u);
  EXPECT_THAT(OpIds(graph, found.regions[0].forward_ops),
              ElementsAre("lsm", "nll"));
  // The backward's matmuls need the logits' gradient, not the logits:
  // they stay, and the logits are read a slice at a time.
  EXPECT_THAT(TensorIds(graph, found.regions[0].gradients),
              ElementsAre("gw", "gh"));
  EXPECT_THAT(TensorIds(graph, found.regions[0].inputs),
              ::testing::Contains("logits"));
}

// A decoder that projects each of its 2 steps (4 rows each) and stacks
// the logits, as the PyTorch hook captures it: the backward selects each
// step's gradient, and the steps' weight gradients are added.
constexpr char kStepwiseHead[] = R"(
graph stepwise_head
tensor x0 f32[4,4] input
tensor x1 f32[4,4] input
tensor w f32[16,4] parameter
tensor tgt i64[8] input
tensor g f32[] input
op t0 fwd data_movement w -> wt0:view(f32[4,16]) type=aten::t args=% cost=0
op mm0 fwd gemm x0 wt0 w -> l0:f32[4,16] type=aten::mm args=%,% cost=4
op t1 fwd data_movement w -> wt1:view(f32[4,16]) type=aten::t args=% cost=0
op mm1 fwd gemm x1 wt1 w -> l1:f32[4,16] type=aten::mm args=%,% cost=4
op st fwd data_movement l0 l1 -> l3:f32[2,4,16] type=aten::stack args=[%,%] cost=1
op v fwd data_movement l3 -> logits:view(f32[8,16]) type=aten::view args=%,[8,16] cost=0
op lsm fwd softmax logits -> lp:f32[8,16] type=aten::_log_softmax args=%,1,False cost=1
op nll fwd reduction lp tgt -> loss:f32[] tw:f32[] type=aten::nll_loss_forward args=%,%,None,1,-100 cost=1
op nllb bwd reduction g lp tgt tw -> gl:f32[8,16] type=aten::nll_loss_backward args=%,%,%,None,1,-100,% cost=1
op lsmb bwd softmax gl lp -> glog:f32[8,16] type=aten::_log_softmax_backward_data args=%,%,1,torch.float32 cost=1
op vb bwd data_movement glog -> g3:view(f32[2,4,16]) type=aten::view args=%,[2,4,16] cost=0
op s1 bwd data_movement g3 -> g1:view(f32[4,16]) type=aten::select args=%,0,1 cost=0
op tg1 bwd data_movement g1 -> g1t:view(f32[16,4]) type=aten::t args=% cost=0
op mmw1 bwd gemm g1t x1 -> gw1:f32[16,4] type=aten::mm args=%,% cost=4
op tw1 bwd data_movement wt1 -> wt1t:view(f32[16,4]) type=aten::t args=% cost=0
op mmx1 bwd gemm g1 wt1t -> gx1:f32[4,4] type=aten::mm args=%,% cost=4
op s0 bwd data_movement g3 -> g0:view(f32[4,16]) type=aten::select args=%,0,0 cost=0
op tg0 bwd data_movement g0 -> g0t:view(f32[16,4]) type=aten::t args=% cost=0
op mmw0 bwd gemm g0t x0 -> gw0:f32[16,4] type=aten::mm args=%,% cost=4
op tw0 bwd data_movement wt0 -> wt0t:view(f32[16,4]) type=aten::t args=% cost=0
op mmx0 bwd gemm g0 wt0t -> gx0:f32[4,4] type=aten::mm args=%,% cost=4
op add bwd elementwise gw1 gw0 -> gw:f32[16,4] type=aten::add args=%,% cost=1
output loss gw gx0 gx1
)";

TEST(ChunkRegionTest, StackedStepsAreBlocksAndTheirSumsAddInside) {
  const Graph graph = testing::ParseOrFail(kStepwiseHead);
  ChunkRegion region;
  ASSERT_TRUE(OneRegion(graph, &region));
  EXPECT_EQ(region.rows, 8);
  EXPECT_EQ(region.block_rows, 4);
  // The steps' projections join through the stack.
  EXPECT_THAT(OpIds(graph, region.forward_ops),
              ElementsAre("mm0", "mm1", "st", "v", "lsm", "nll"));
  std::vector<std::string> blocks;
  for (const ChunkRegion::BlockOp& b : region.block_ops) {
    blocks.push_back(absl::StrCat(graph.op(b.op).id, "@", b.first_row));
  }
  EXPECT_THAT(blocks,
              ElementsAre("mm0@0", "mm1@4", "s1@4", "tg1@4", "mmw1@4", "mmx1@4",
                          "s0@0", "tg0@0", "mmw0@0", "mmx0@0"));
  // Each step's weight gradient adds into one: only the sum leaves.
  EXPECT_THAT(TensorIds(graph, region.summed), ElementsAre("gw1", "gw0", "gw"));
  EXPECT_THAT(TensorIds(graph, region.gradients),
              ElementsAre("gx1", "gx0", "gw"));
  // The steps' rows are read whole by their blocks; nothing is sliced but
  // the targets.
  EXPECT_THAT(TensorIds(graph, region.sliced_inputs), ElementsAre("tgt"));
  // l0, l1, l3, lp, gl, glog (256 or 512 each) and tw; the sums never
  // exist.
  EXPECT_EQ(region.inner_bytes, 2 * 256 + 4 * 512 + 4);
  // One block per chunk: l0 and its chunk of l3, then lp, gl and glog of
  // 4 rows while the log-softmax's backward runs (3 x 256); both blocks:
  // 3 x 512.
  EXPECT_EQ(*ChunkWorkspaceBytes(graph, region, 4, {}), 768);
  EXPECT_EQ(*ChunkWorkspaceBytes(graph, region, 8, {}), 1536);
  // Chunks hold whole blocks: 3 chunks' 3 rows become 2 chunks of 4.
  ASSERT_OK_AND_ASSIGN(
      ChunkedGraph chunked,
      ChunkGraph(graph, testing::RelativeCosts(graph), {region}, 3, {},
                 /*launch_cost=*/0.5));
  EXPECT_EQ(chunked.steps[0].chunks, 2);
  EXPECT_EQ(chunked.steps[0].chunk_rows, 4);
  // Every chunk launches st, lsm, nll, nllb and lsmb; a block's ops run
  // once and the add never runs. The backward step scales 3 gradients.
  EXPECT_DOUBLE_EQ(chunked.extra_cost, 1 * 5 * 0.5 + 3 * 0.5);
}

TEST(ChunkRegionTest, StepsReadAcrossBlocksStayOutside) {
  // Step 0's input gradient also reads step 1's rows: not one block. The
  // steps' projections and their backward stay outside, and the rows'
  // gradient leaves whole, as without blocks.
  std::string crossed = kStepwiseHead;
  crossed.replace(crossed.find("op mmx0 bwd gemm g0 wt0t"), 24,
                  "op mix bwd elementwise g0 g1 -> g01:f32[4,16] args=%,% "
                  "cost=1\nop mmx0 bwd gemm g01 wt0t");
  const Graph graph = testing::ParseOrFail(crossed);
  ChunkRegion region;
  ASSERT_TRUE(OneRegion(graph, &region));
  EXPECT_EQ(region.block_rows, 0);
  EXPECT_THAT(region.block_ops, IsEmpty());
  EXPECT_THAT(OpIds(graph, region.forward_ops), ElementsAre("v", "lsm", "nll"));
  EXPECT_THAT(TensorIds(graph, region.gradients), ElementsAre("glog"));
}

TEST(ChunkPlanTest, AutoChunksWhenItLowersThePeakWithinTheBudget) {
  const Graph graph = testing::ParseOrFail(kLmHead);
  const std::vector<double> costs = testing::RelativeCosts(graph);
  RecomputePlanOptions options;
  ASSERT_OK_AND_ASSIGN(RecomputePlan plain,
                       GenerateRecomputePlan(graph, costs, options));
  EXPECT_EQ(plain.chunked_graph, nullptr);
  options.chunking.enabled = true;
  options.chunking.min_chunk_rows = 1;
  options.chunking.launch_cost = 0;
  ASSERT_OK_AND_ASSIGN(RecomputePlan chunked,
                       GenerateRecomputePlan(graph, costs, options));
  ASSERT_NE(chunked.chunked_graph, nullptr);
  ASSERT_EQ(chunked.chunked_regions.size(), 1u);
  EXPECT_EQ(chunked.chunked_regions[0].chunks, 8);
  EXPECT_EQ(chunked.planned_peak_bytes, 1160);
  EXPECT_EQ(chunked.baseline_peak_bytes, 2052);
  EXPECT_LT(chunked.planned_peak_bytes, plain.planned_peak_bytes);
  EXPECT_THAT(chunked.message, HasSubstr("computed in 8 chunk(s) of 1 rows"));
  // Its schedule replays on the chunked graph to the peak it claims.
  ASSERT_OK_AND_ASSIGN(
      SimulationResult replay,
      ReplaySchedule(*chunked.chunked_graph, chunked.schedule));
  EXPECT_EQ(replay.peak_bytes, chunked.planned_peak_bytes);
  // Launches dearer than the whole budget: no chunking at all.
  options.chunking.launch_cost = 1e6;
  ASSERT_OK_AND_ASSIGN(RecomputePlan dear,
                       GenerateRecomputePlan(graph, costs, options));
  EXPECT_EQ(dear.chunked_graph, nullptr);
  EXPECT_EQ(dear.planned_peak_bytes, plain.planned_peak_bytes);
}

TEST(ChunkPlanTest, MemoryLimitOnlyChunksAsFarAsNeeded) {
  const Graph graph = testing::ParseOrFail(kLmHead);
  RecomputePlanOptions options;
  options.chunking.enabled = true;
  options.chunking.min_chunk_rows = 1;
  options.chunking.launch_cost = 0.25;
  options.memory_limit_bytes = 1400;
  ASSERT_OK_AND_ASSIGN(
      RecomputePlan plan,
      GenerateRecomputePlan(graph, testing::RelativeCosts(graph), options));
  EXPECT_TRUE(plan.feasible);
  ASSERT_EQ(plan.chunked_regions.size(), 1u);
  // 4 chunks (1352 bytes) meet 1400 at the fewest launches.
  EXPECT_EQ(plan.chunked_regions[0].chunks, 4);
  EXPECT_EQ(plan.planned_peak_bytes, 1352);
  EXPECT_DOUBLE_EQ(plan.recompute_cost, 3 * 7 * 0.25 + 2 * 0.25);
}

}  // namespace
}  // namespace echo::planner

namespace echo::planner {
namespace {

// Re-chunking one rewrite gives the rewrite of that count: the same steps,
// costs, attributes and peaks.
TEST(ChunkRewriteTest, RechunkEqualsTheRewriteOfThatCount) {
  const Graph graph = testing::ParseOrFail(kLmHead);
  const std::vector<double> costs = testing::RelativeCosts(graph);
  ChunkRegion region;
  ASSERT_TRUE(OneRegion(graph, &region));
  const std::vector<ChunkRegion> regions = {region};
  ASSERT_OK_AND_ASSIGN(ChunkedGraph edited,
                       ChunkGraph(graph, costs, regions, 1, {}, 0.25));
  for (int32_t chunks : {2, 8, 4, 3, 1}) {
    SCOPED_TRACE(chunks);
    ASSERT_OK(Rechunk(graph, costs, regions, chunks, {}, 0.25, edited));
    ASSERT_OK_AND_ASSIGN(const ChunkedGraph built,
                         ChunkGraph(graph, costs, regions, chunks, {}, 0.25));
    EXPECT_EQ(edited.op_costs, built.op_costs);
    EXPECT_DOUBLE_EQ(edited.extra_cost, built.extra_cost);
    ASSERT_EQ(edited.steps.size(), 1u);
    EXPECT_EQ(edited.steps[0].chunks, built.steps[0].chunks);
    EXPECT_EQ(edited.steps[0].chunk_rows, built.steps[0].chunk_rows);
    EXPECT_EQ(edited.steps[0].chunk_workspace_bytes,
              built.steps[0].chunk_workspace_bytes);
    EXPECT_EQ(edited.steps[0].forward_op, built.steps[0].forward_op);
    EXPECT_EQ(edited.steps[0].backward_op, built.steps[0].backward_op);
    ASSERT_EQ(edited.graph.num_ops(), built.graph.num_ops());
    for (OpIndex o = 0; o < built.graph.num_ops(); ++o) {
      EXPECT_EQ(edited.graph.op(o).workspace_bytes,
                built.graph.op(o).workspace_bytes);
      EXPECT_EQ(edited.graph.op(o).attributes, built.graph.op(o).attributes);
    }
    EXPECT_EQ(SimulatePlain(edited.graph).peak_bytes,
              SimulatePlain(built.graph).peak_bytes);
  }
  EXPECT_FALSE(Rechunk(graph, costs, regions, 0, {}, 0.25, edited).ok());
  EXPECT_FALSE(Rechunk(graph, costs, {}, 2, {}, 0.25, edited).ok());
}

}  // namespace
}  // namespace echo::planner
