// The stash objective's repair: a plan whose peak is above the plain peak
// (the selection never lets a stash plan exceed it; a minimum cut's clones,
// placed without regard to peaks, can raise it) is brought back under it.
#ifndef ECHO_PLANNER_RECOMPUTE_SEARCH_RECOMPUTE_REPAIR_H_
#define ECHO_PLANNER_RECOMPUTE_SEARCH_RECOMPUTE_REPAIR_H_

#include <cstdint>

#include "planner/recompute/search/recompute_state.h"

namespace echo::planner {

// Takes plan items (set ops, splits) out of `state` until its peak is <=
// `limit`: each time, among the items whose instances touch the peak slot
// and whose removal lowers it without raising the peak, the one that adds
// the fewest stashed bytes per byte of excess it removes. Removals only
// lower the cost, so the budget they free is left for the stash greedy.
// Returns whether the peak got to the limit; the removals stay either way.
bool RepairPeak(int64_t limit, RecomputeState& state);

}  // namespace echo::planner

#endif  // ECHO_PLANNER_RECOMPUTE_SEARCH_RECOMPUTE_REPAIR_H_
