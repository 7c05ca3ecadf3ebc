// The incremental interval model (recompute_state.h) against the replay
// checker: main slots equal the replay's step bytes, pre slots bound the
// clones' steps from above, and incremental updates equal a rebuild from
// scratch.
#include "planner/recompute/search/recompute_state.h"

#include <random>

#include "gtest/gtest.h"
#include "planner/recompute/recompute_problem.h"
#include "planner/recompute/search/segment_tree.h"
#include "random_graphs.h"
#include "test_util.h"

namespace echo::planner {
namespace {

TEST(MaxSegmentTreeTest, RangeAddAndMax) {
  MaxSegmentTree tree(5);
  tree.Add(0, 4, 10);
  tree.Add(1, 2, 5);
  tree.Add(2, 4, -20);
  // 10 15 -5 -10 -10
  EXPECT_EQ(tree.Max(), 15);
  EXPECT_EQ(tree.ArgMax(), 1);
  EXPECT_EQ(tree.RangeMax(2, 4), -5);
  EXPECT_EQ(tree.Value(3), -10);
  tree.Add(4, 4, 40);
  EXPECT_EQ(tree.Max(), 30);
  EXPECT_EQ(tree.ArgMax(), 4);
  // Odd positions: 15 -10.
  EXPECT_EQ(tree.OddMax(), 15);
}

TEST(MaxSegmentTreeTest, OddMaxEqualsTheScanOnRandomAdds) {
  std::mt19937 rng(7);
  for (int size : {2, 3, 8, 33, 100}) {
    MaxSegmentTree tree(size);
    std::vector<int64_t> values(size, 0);
    for (int round = 0; round < 200; ++round) {
      const int32_t lo = rng() % size;
      const int32_t hi = lo + rng() % (size - lo);
      const int64_t delta = static_cast<int64_t>(rng() % 2001) - 1000;
      tree.Add(lo, hi, delta);
      for (int32_t k = lo; k <= hi; ++k) values[k] += delta;
      int64_t odd_max = values[1];
      for (int32_t k = 1; k < size; k += 2) {
        odd_max = std::max(odd_max, values[k]);
      }
      ASSERT_EQ(tree.OddMax(), odd_max) << "size " << size;
    }
  }
}

// Checks the model of `state` against a replay of its schedule.
void ExpectMatchesReplay(const RecomputeProblem& problem,
                         const RecomputeState& state) {
  const Schedule schedule = ScheduleFromRecomputeChoice(problem, state.plan());
  absl::StatusOr<SimulationResult> replay =
      ReplaySchedule(problem.graph, schedule, problem.memory);
  ASSERT_TRUE(replay.ok()) << replay.status();
  int32_t step = 0;
  int64_t peak = 0;
  int64_t main_max = 0;
  double cost = 0;
  for (OpIndex o = 0; o < problem.num_ops(); ++o) {
    int64_t clone_max = 0;
    while (schedule[step].recompute) {
      clone_max = std::max(clone_max, replay->step_bytes[step]);
      cost += problem.op_costs[schedule[step].op];
      ++step;
    }
    EXPECT_GE(state.SlotValue(RecomputeState::PreSlot(o)), clone_max)
        << "op " << o;
    EXPECT_EQ(state.SlotValue(RecomputeState::MainSlot(o)),
              replay->step_bytes[step])
        << "op " << o;
    peak = std::max({peak, state.SlotValue(RecomputeState::PreSlot(o)),
                     state.SlotValue(RecomputeState::MainSlot(o))});
    main_max = std::max(main_max, replay->step_bytes[step]);
    ++step;
  }
  EXPECT_EQ(state.Peak(), peak);
  // The selection's lower bound (auto_pass.cc): the replay's original
  // steps, never above its peak.
  EXPECT_EQ(state.MainSlotMax(), main_max);
  EXPECT_LE(state.MainSlotMax(), replay->peak_bytes);
  // Covers (the clones' span first, then the list) against the instances.
  for (TensorIndex t = 0; t < problem.graph.num_tensors(); ++t) {
    for (int32_t slot = 0; slot < state.num_slots(); ++slot) {
      bool covers = state.original(t).Covers(slot);
      for (const RecomputeState::Interval& clone : state.clones(t)) {
        covers = covers || clone.Covers(slot);
      }
      ASSERT_EQ(state.Covers(t, slot), covers)
          << "tensor " << t << " slot " << slot;
    }
  }
  EXPECT_GE(state.Peak(), replay->peak_bytes);
  if (std::optional<int64_t> replay_peak = state.ReplayPeak()) {
    EXPECT_EQ(*replay_peak, replay->peak_bytes);
  }
  EXPECT_NEAR(state.cost(), cost, 1e-6);
  // A rebuild from scratch gives the same profile.
  RecomputeState rebuilt(problem);
  rebuilt.Assign(state.plan());
  for (int32_t slot = 0; slot < state.num_slots(); ++slot) {
    ASSERT_EQ(rebuilt.SlotValue(slot), state.SlotValue(slot)) << slot;
  }
}

// One random change, made alike on every state (which hold the same plan):
// every third move toggles a split at a random need point of a random
// eligible op (also outside the set: its original then serves the uses
// before it), the others toggle the op in the set. False when the op has
// no need point.
bool RandomChange(int move, const std::vector<OpIndex>& eligible,
                  std::mt19937& rng,
                  const std::vector<RecomputeState*>& states) {
  const RecomputeState& first = *states.front();
  const OpIndex o = eligible[rng() % eligible.size()];
  if (move % 3 != 2) {
    const bool in_set = !first.Contains(o);
    for (RecomputeState* state : states) state->Set(o, in_set);
    return true;
  }
  std::vector<OpIndex> needs;
  first.NeedPointsInto(o, needs);
  if (needs.empty()) return false;
  const OpIndex point = needs[rng() % needs.size()];
  const std::vector<OpIndex>& splits = first.splits(o);
  const bool remove = std::binary_search(splits.begin(), splits.end(), point);
  for (RecomputeState* state : states) {
    if (remove) {
      state->RemoveSplit(o, point);
    } else {
      state->AddSplit(o, point);
    }
  }
  return true;
}

TEST(RecomputeStateTest, IncrementalModelMatchesReplayOnRandomGraphs) {
  int32_t states_with_split_clones = 0;
  int32_t states_with_late_clones = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    SCOPED_TRACE(seed);
    testing::RandomGraphOptions options;
    options.forward_ops = 4 + seed % 20;
    testing::RandomGraph random =
        testing::MakeRandomTrainingGraph(seed, options);
    MemoryModelOptions memory;
    if (seed % 3 == 0) memory.rounding_bytes = 64;
    RecomputeProblem problem(random.graph, random.op_costs, memory);
    RecomputeState state(problem);
    EXPECT_EQ(state.Peak(), SimulatePlain(random.graph, memory).peak_bytes);
    std::mt19937 rng(seed);
    std::vector<OpIndex> eligible;
    for (OpIndex o = 0; o < problem.num_ops(); ++o) {
      if (problem.eligible[o]) eligible.push_back(o);
    }
    if (eligible.empty()) continue;
    for (int move = 0; move < 40; ++move) {
      if (!RandomChange(move, eligible, rng, {&state})) continue;
      ExpectMatchesReplay(problem, state);
      if (::testing::Test::HasFailure()) return;
      for (OpIndex x = 0; x < problem.num_ops(); ++x) {
        if (state.clone_points(x).size() > 1) {
          ++states_with_split_clones;
          break;
        }
      }
      for (OpIndex x = 0; x < problem.num_ops(); ++x) {
        if (!state.Contains(x) && !state.clone_points(x).empty()) {
          ++states_with_late_clones;
          break;
        }
      }
    }
  }
  // The walk must exercise ops cloned more than once.
  EXPECT_GT(states_with_split_clones, 50);
  // ... and ops stashed up to a late clone.
  EXPECT_GT(states_with_late_clones, 50);
}

// The chain counts TrackChains keeps answer ChainDepthIfAdded as the walks
// do, for caps below and at the tracked one, after every kind of plan
// change: several between two questions (the counts are brought up to date
// when a depth is asked), an op taken out and put back, and Assign of
// another plan.
TEST(RecomputeStateTest, TrackedChainDepthsEqualTheWalks) {
  int32_t capped_answers = 0;
  for (const int32_t tracked_cap : {2, 4, 64}) {
    for (uint64_t seed = 1; seed <= 30; ++seed) {
      SCOPED_TRACE(::testing::Message()
                   << "seed " << seed << " cap " << tracked_cap);
      testing::RandomGraphOptions options;
      options.forward_ops = 6 + seed % 24;
      testing::RandomGraph random =
          testing::MakeRandomTrainingGraph(seed, options);
      RecomputeProblem problem(random.graph, random.op_costs, {});
      RecomputeState walked(problem);
      RecomputeState tracked(problem);
      tracked.TrackChains(tracked_cap);
      RecomputeState scratch(problem);
      std::mt19937 rng(seed);
      std::vector<OpIndex> eligible;
      for (OpIndex o = 0; o < problem.num_ops(); ++o) {
        if (problem.eligible[o]) eligible.push_back(o);
      }
      if (eligible.empty()) continue;
      int changes = 0;
      for (int question = 0; question < 60; ++question) {
        if (question % 20 == 19) {
          // Another plan: a few changes away from this one.
          scratch.Assign(walked.plan());
          for (int k = 0; k < 4; ++k) {
            RandomChange(changes++, eligible, rng, {&scratch});
          }
          walked.Assign(scratch.plan());
          tracked.Assign(scratch.plan());
        } else {
          const int count = 1 + static_cast<int>(rng() % 3);
          for (int k = 0; k < count; ++k) {
            RandomChange(changes++, eligible, rng, {&walked, &tracked});
          }
          if (question % 5 == 2) {
            // Out and back between two questions.
            const OpIndex o = eligible[rng() % eligible.size()];
            for (int k = 0; k < 2; ++k) {
              const bool in_set = !walked.Contains(o);
              walked.Set(o, in_set);
              tracked.Set(o, in_set);
            }
          }
        }
        std::vector<int32_t> caps;
        for (int32_t cap = 1; cap <= std::min(tracked_cap, 6); ++cap) {
          caps.push_back(cap);
        }
        if (tracked_cap > 6) caps.push_back(tracked_cap);
        for (int32_t cap : caps) {
          for (OpIndex x = 0; x < problem.num_ops(); ++x) {
            const int32_t depth = walked.ChainDepthIfAdded(x, cap);
            ASSERT_EQ(tracked.ChainDepthIfAdded(x, cap), depth)
                << "op " << x << " cap " << cap << " question " << question;
            capped_answers += depth == cap + 1 && cap > 1;
          }
        }
      }
    }
  }
  // Chains longer than the cap must occur, so that the cap is exercised.
  EXPECT_GT(capped_answers, 100);
}

}  // namespace
}  // namespace echo::planner
