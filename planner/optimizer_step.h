// The optimizer in the iteration (docs/design.md §4, "Graph model"): a
// graph whose metadata names the optimizer it is trained with, and has no
// optimizer state of its own, gets that state and the step that updates the
// parameters, so that every answer (estimate, plan, fit, largest batch) is
// about the iteration users run, not forward+backward alone (a bf16 model
// with fp32 Adam holds 8 bytes of state per parameter beside its 4 of
// weight and gradient).
//
// What is added, per parameter p (n elements) that trains (every PARAMETER
// tensor, or, when some gradient names its parameter, those named: frozen
// weights and buffers get no state), in the state dtype (the parameter's
// own unless the metadata names one):
//   sgd           nothing
//   sgd_momentum  a momentum buffer (n)
//   adam, adamw   exp_avg and exp_avg_sq (2n) and a step counter (a 0-dim
//                 float32 tensor)
//   adagrad       the sum of squares (n) and a step counter
//   rmsprop       the square average (n) and a step counter
// and, after the last op, one optimizer-phase op ("echo.optimizer_step")
// whose workspace is the step's temporaries, as torch's implementations
// make them: foreach (torch's default on GPUs) one list over all
// parameters for adam, adamw, adagrad and rmsprop (sqrt of the second
// moment), none for sgd; for_loop (its default on CPUs) one such tensor at
// a time (the largest parameter's); fused none.
#ifndef ECHO_PLANNER_OPTIMIZER_STEP_H_
#define ECHO_PLANNER_OPTIMIZER_STEP_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "planner/graph.h"

namespace echo::planner {

// Graph metadata keys (the adapter writes them from Graph.optimizer).
inline constexpr char kOptimizerKey[] = "echo.optimizer";
inline constexpr char kOptimizerStateDTypeKey[] = "echo.optimizer.state_dtype";
inline constexpr char kOptimizerImplementationKey[] =
    "echo.optimizer.implementation";
// "true": gradients are held across the step (OptimizerSpec below).
inline constexpr char kOptimizerHoldsGradientsKey[] =
    "echo.optimizer.holds_gradients";
// "true": each parameter's update may run in the backward (OptimizerSpec).
inline constexpr char kOptimizerUpdateInBackwardKey[] =
    "echo.optimizer.update_in_backward";
// The step op's id and type.
inline constexpr char kOptimizerStepOpId[] = "echo.optimizer_step";
// The type of the ops that apply one parameter's update in the backward
// (ids: "echo.update_in_backward:<gradient id>").
inline constexpr char kUpdateInBackwardOpType[] = "echo.update_in_backward";
// The type of the ops that add a new gradient into its held one (their ids:
// "echo.accumulate_gradient:<gradient id>"). Ops echod adds have ids that
// start with "echo.": the client runs them itself (optimizer.step(),
// autograd's accumulation), not from the plan.
inline constexpr char kAccumulateGradientOpType[] = "echo.accumulate_gradient";

enum class OptimizerKind {
  kSgd,
  kSgdMomentum,
  kAdam,
  kAdamW,
  kAdagrad,
  kRmsprop
};
enum class OptimizerImplementation { kForeach, kForLoop, kFused };

struct OptimizerSpec {
  OptimizerKind kind = OptimizerKind::kAdamW;
  // kUnspecified: each parameter's dtype.
  DType state_dtype = DType::kUnspecified;
  OptimizerImplementation implementation = OptimizerImplementation::kForeach;
  // Gradients held while forward and backward run (accumulation over
  // micro-batches, or zero_grad(set_to_none=False)): each gradient the graph
  // outputs (role gradient) gets a held tensor of its size, live all
  // iteration, and an op right after its producer that adds it in and frees
  // it.
  bool holds_gradients = false;
  // The client may apply each parameter's update as soon as its gradient is
  // complete and free the gradient there (one backward per step, gradients
  // untouched before the step). Each gradient that names its parameter
  // (Tensor::gradient_of) then gets an op after the last reader of the
  // gradient and of the parameter (whose update would change what a later
  // reader sees) that reads both and the parameter's state, with that
  // parameter's share of the step's temporaries; the gradient is no longer
  // an output, so it is freed there. AddOptimizerStep keeps this only where
  // it does not raise the plain peak. Not valid with holds_gradients.
  bool update_in_backward = false;
};

// The names the metadata uses ("adamw", "foreach", ...).
const char* OptimizerKindName(OptimizerKind kind);
const char* OptimizerImplementationName(OptimizerImplementation impl);

// The optimizer the graph's metadata names; nullopt when it names none.
// InvalidArgument for a name it does not know.
absl::StatusOr<std::optional<OptimizerSpec>> OptimizerOf(const Graph& graph);

// Whether the graph already carries optimizer state or an optimizer-phase
// op (the client captured the step itself): nothing is added then.
bool HasOptimizerStep(const Graph& graph);

// What AddOptimizerStep added, for answers to say.
struct OptimizerStepSummary {
  int64_t state_bytes = 0;      // persistent, beside the parameters
  int64_t temporary_bytes = 0;  // the step's workspace
  int32_t state_tensors = 0;
  int64_t held_gradient_bytes = 0;  // with holds_gradients
  // With update_in_backward: the gradients whose update runs in the
  // backward (0 where that would raise the peak), of those the graph
  // outputs (views, which own no bytes, not counted), and the plain peaks
  // with the updates there and at the end.
  int32_t updated_in_backward = 0;
  int32_t gradients = 0;
  int64_t in_backward_peak_bytes = 0;
  int64_t at_end_peak_bytes = 0;
};

// `graph` with the optimizer's state and step added (OptimizerOf must name
// one; see above). `summary` may be null.
absl::StatusOr<Graph> AddOptimizerStep(const Graph& graph,
                                       const OptimizerSpec& optimizer,
                                       OptimizerStepSummary* summary);

}  // namespace echo::planner

#endif  // ECHO_PLANNER_OPTIMIZER_STEP_H_
