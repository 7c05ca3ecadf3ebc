// AUTO: its search (search/auto_recompute.h), seeded with the ECHO and
// CHEN_SQRT plans (and for the stash objective, the minimum cuts within the
// budget), then the best candidate by replay. OPTIMAL warm-starts from it.
#ifndef ECHO_PLANNER_RECOMPUTE_PASSES_AUTO_PASS_H_
#define ECHO_PLANNER_RECOMPUTE_PASSES_AUTO_PASS_H_

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "planner/memory_simulator.h"
#include "planner/recompute/recompute_pass.h"

namespace echo::planner {

// A replayed candidate: its schedule, peak, recompute cost and stash.
struct Evaluated {
  Schedule schedule;
  int64_t peak = 0;
  double cost = 0;
  int64_t stash_bytes = 0;
  // The schedule's replay, when the selection made one.
  std::optional<SimulationResult> replay;
};

// AUTO's best schedule for the input's budget.
absl::StatusOr<Evaluated> RunAuto(const PassInput& input);

}  // namespace echo::planner

#endif  // ECHO_PLANNER_RECOMPUTE_PASSES_AUTO_PASS_H_
