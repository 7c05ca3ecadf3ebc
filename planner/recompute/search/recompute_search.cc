#include "planner/recompute/search/recompute_search.h"

#include <algorithm>
#include <functional>
#include <tuple>
#include <utility>

namespace echo::planner {

class RecomputeSearch::Impl {
 public:
  Impl(const RecomputeProblem& problem, int32_t max_depth,
       const std::vector<int32_t>* copy_classes)
      : problem_(problem),
        state_(problem),
        finder_(problem, state_, max_depth, copy_classes) {
    // Every weighed move asks the depth of its chain: kept counts beat walks
    // (at 20% on a 119k-op LSTM, whose ECHO seed chains 1,603 ops, the walks
    // were half of AUTO's time). A plan change recounts only the ops whose
    // counts change, at most what one walk visits.
    state_.TrackChains(max_depth);
  }

  static constexpr size_t kMinCleanupTries = 256;
  // Large graphs: cleanup tries per call (the most expensive items first),
  // and how many tries after the last that held (or the first) it makes
  // before it stops; a failed chunk counts as one try. On the 115k-op
  // transformer at 5% every start's cleanup failed 2,048 tries of 2,048;
  // runs of 268-1,715 failures do end in successes (paper-size NMT at 20%,
  // the 119k LSTM's ECHO start), and stopping after 256 left the NMT's peak
  // 8% higher; after 1,024, 118 of 120 plans on the batch graphs are the
  // same and two differ by under 2% (docs/benchmarks.md).
  static constexpr size_t kMaxBatchCleanupTries = 2048;
  static constexpr size_t kMaxBatchCleanupFailures = 1024;
  // A move's copies are tried until this many in a row do not help.
  static constexpr int32_t kMaxCopyFailures = 8;

  RecomputeState& state() { return state_; }
  bool batch() const { return finder_.batch(); }
  bool depth_bound_hit() const { return finder_.depth_bound_hit(); }
  int64_t copies_applied() const { return copies_applied_; }
  void SetStop(std::function<bool()> stop) { stop_ = std::move(stop); }
  bool Stopped() const { return stop_ && stop_(); }

  // Peak-driven greedy: lowers the peak until it is <= goal.limit (limit
  // mode; returns whether it got there) or until no move fits the budget
  // (overhead mode). Every applied step goes to log_; best_steps_ is the
  // length of the log prefix with the lowest peak (then cost).
  bool Greedy(const SearchGoal& goal) {
    log_.clear();
    best_steps_ = 0;
    const bool stash = finder_.MinimizesStash(goal);
    // Stash: moves on the tensors live across the last forward op.
    auto target_slot = [&] {
      return stash ? state_.stash_slot() : state_.PeakSlot();
    };
    // Lexicographic: (stash,) peak, cost.
    auto key = [&] {
      return std::make_tuple(stash ? state_.StashBytes() : 0, state_.Peak(),
                             state_.cost());
    };
    auto best_key = key();
    best_peak_ = state_.Peak();
    while (true) {
      if (goal.limit_mode && state_.Peak() <= goal.limit) return true;
      if (Stopped()) return false;
      std::vector<SearchMove> moves = finder_.RankedMoves(goal, target_slot());
      if (moves.empty()) return false;
      // The best move applies as evaluated. In batch mode the next ones are
      // re-checked against the new peak and applied while they still help,
      // saving a scan per move on large graphs; so are a move's copies.
      bool applied = false;
      auto try_steps = [&](const std::vector<SearchStep>& steps, bool must_help,
                           bool check_depth) {
        const int64_t peak = state_.Peak();
        const int32_t slot = target_slot();
        const int64_t slot_value = finder_.Measure(goal, slot);
        const size_t logged = log_.size();
        for (const SearchStep& step : steps) {
          if (check_depth && !state_.InPlan(step.op) &&
              !finder_.DepthAllows(step.op)) {
            continue;
          }
          if (ApplyStep(step, state_)) log_.push_back(step);
        }
        const bool helps = log_.size() > logged && state_.Peak() <= peak &&
                           finder_.Measure(goal, slot) < slot_value &&
                           (goal.limit_mode || state_.cost() <= goal.budget);
        if (must_help && !helps) {
          while (log_.size() > logged) {
            RemoveStep(log_.back(), state_);
            log_.pop_back();
          }
          return false;
        }
        if (key() < best_key) {
          best_steps_ = log_.size();
          best_key = key();
          best_peak_ = state_.Peak();
        }
        return true;
      };
      auto done = [&] {
        return goal.limit_mode && state_.Peak() <= goal.limit;
      };
      for (const SearchMove& move : moves) {
        if ((applied && !finder_.batch()) || done()) break;
        applied |= try_steps(move.steps, applied, false);
        int32_t failures = 0;
        for (OpIndex copy : move.copies) {
          if (failures >= kMaxCopyFailures || done()) break;
          const bool helped =
              finder_.MapMove(move, copy, target_slot(), copy_steps_) &&
              try_steps(copy_steps_, true, true);
          failures = helped ? 0 : failures + 1;
          copies_applied_ += helped;
        }
      }
    }
  }

  // Undoes the log back to its best prefix.
  bool RewindToBest() {
    while (log_.size() > best_steps_) {
      RemoveStep(log_.back(), state_);
      log_.pop_back();
    }
    return best_steps_ > 0;
  }
  int64_t best_peak() const { return best_peak_; }

  // Drops recomputed ops and splits, most expensive first, while the peak
  // stays <= limit.
  void Cleanup(int64_t limit) {
    struct Item {
      SearchStep step;
      double cost;
    };
    std::vector<Item> items;
    for (OpIndex o = 0; o < problem_.num_ops(); ++o) {
      if (!state_.InPlan(o)) continue;
      const PointList& points = state_.clone_points(o);
      if (points.empty() && state_.Contains(o)) {
        state_.Set(o, false);  // a member without clones changes nothing
        continue;
      }
      size_t first_split = 0;
      if (state_.Contains(o)) {
        items.push_back(
            {SearchStep{o, kNoOp}, problem_.op_costs[o] * points.size()});
        first_split = 1;
      }
      for (size_t k = first_split; k < points.size(); ++k) {
        items.push_back({SearchStep{o, points[k]}, problem_.op_costs[o]});
      }
    }
    std::stable_sort(
        items.begin(), items.end(),
        [](const Item& a, const Item& b) { return a.cost > b.cost; });
    // Removals are tried in chunks that grow while they succeed (most of a
    // seed plan may go at once) and fall back to one at a time. The cheap
    // tail frees little budget: stop once the untried items cost under 2% of
    // the plan, or (large graphs) after kMaxBatchCleanupTries tries or
    // kMaxBatchCleanupFailures tries after the last that held.
    double untried = 0;
    for (const Item& item : items) untried += item.cost;
    const double tail = 0.02 * untried;
    std::vector<SearchStep> removed;
    size_t chunk = 1;
    size_t tries = 0;
    size_t last_success = 0;  // the last try that held (0: none yet)
    for (size_t i = 0; i < items.size(); ++tries) {
      if (i >= kMinCleanupTries && untried < tail) break;
      if (tries % 64 == 63 && Stopped()) break;
      if (finder_.batch() &&
          (tries >= kMaxBatchCleanupTries ||
           tries - last_success >= kMaxBatchCleanupFailures)) {
        break;
      }
      const size_t end = std::min(items.size(), i + chunk);
      removed.clear();
      for (size_t k = i; k < end; ++k) {
        if (RemoveStep(items[k].step, state_)) removed.push_back(items[k].step);
      }
      if (state_.Peak() <= limit) {
        last_success = tries;
        for (size_t k = i; k < end; ++k) untried -= items[k].cost;
        i = end;
        chunk = std::min<size_t>(2 * chunk, 64);
        continue;
      }
      for (auto it = removed.rbegin(); it != removed.rend(); ++it) {
        RestoreStep(*it, state_);
      }
      if (chunk == 1) {
        untried -= items[i].cost;
        ++i;
      } else {
        chunk = 1;
      }
    }
  }

  // Re-insertion: take out an expensive op, repair to the limit without it,
  // clean up; keep the result when cheaper. At most `max_trials` trials.
  void LocalSearch(int64_t limit, int32_t max_trials) {
    std::vector<OpIndex> ops;
    for (OpIndex o = 0; o < problem_.num_ops(); ++o) {
      if (state_.Contains(o) && problem_.op_costs[o] > 0) ops.push_back(o);
    }
    std::stable_sort(ops.begin(), ops.end(), [this](OpIndex a, OpIndex b) {
      return problem_.op_costs[a] * state_.clone_points(a).size() >
             problem_.op_costs[b] * state_.clone_points(b).size();
    });
    SearchGoal goal;
    goal.limit = limit;
    int32_t trials = 0;
    for (OpIndex op : ops) {
      if (trials++ >= max_trials || Stopped()) break;
      if (!state_.Contains(op)) continue;
      const RecomputeChoice saved = state_.plan();
      const double saved_cost = state_.cost();
      state_.Set(op, false);
      finder_.SetBanned(op, true);
      const bool repaired = Greedy(goal);
      finder_.SetBanned(op, false);
      if (repaired) Cleanup(limit);
      if (!repaired || state_.cost() >= saved_cost - finder_.cost_floor()) {
        state_.Assign(saved);
      }
    }
  }

 private:
  const RecomputeProblem& problem_;
  RecomputeState state_;
  MoveFinder finder_;
  std::vector<SearchStep> copy_steps_;  // the greedy's scratch
  std::vector<SearchStep> log_;
  size_t best_steps_ = 0;
  int64_t best_peak_ = 0;
  std::function<bool()> stop_;
  int64_t copies_applied_ = 0;
};

RecomputeSearch::RecomputeSearch(const RecomputeProblem& problem,
                                 int32_t max_depth,
                                 const std::vector<int32_t>* copy_classes)
    : impl_(std::make_unique<Impl>(problem, max_depth, copy_classes)) {}
RecomputeSearch::~RecomputeSearch() = default;
RecomputeState& RecomputeSearch::state() { return impl_->state(); }
bool RecomputeSearch::batch() const { return impl_->batch(); }
void RecomputeSearch::SetStop(std::function<bool()> stop) {
  impl_->SetStop(std::move(stop));
}
bool RecomputeSearch::Greedy(const SearchGoal& goal) {
  return impl_->Greedy(goal);
}
bool RecomputeSearch::RewindToBest() { return impl_->RewindToBest(); }
int64_t RecomputeSearch::best_peak() const { return impl_->best_peak(); }
int64_t RecomputeSearch::copies_applied() const {
  return impl_->copies_applied();
}
bool RecomputeSearch::depth_bound_hit() const {
  return impl_->depth_bound_hit();
}
void RecomputeSearch::Cleanup(int64_t limit) { impl_->Cleanup(limit); }
void RecomputeSearch::LocalSearch(int64_t limit, int32_t max_trials) {
  impl_->LocalSearch(limit, max_trials);
}

}  // namespace echo::planner
