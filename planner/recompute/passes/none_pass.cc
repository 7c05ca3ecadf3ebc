// NONE: the plain schedule, every op once in graph order.
#include <memory>

#include "planner/recompute/passes/passes.h"

namespace echo::planner {
namespace {

class NonePass final : public RecomputePass {
 public:
  RecomputePolicy policy() const override { return RecomputePolicy::kNone; }
  absl::StatusOr<PassOutput> Run(const PassInput& input) const override {
    PassOutput output;
    output.schedule = PlainSchedule(input.problem.graph);
    return output;
  }
};

}  // namespace

std::unique_ptr<RecomputePass> MakeNonePass() {
  return std::make_unique<NonePass>();
}

}  // namespace echo::planner
