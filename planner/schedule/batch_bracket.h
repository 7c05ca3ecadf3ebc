// The bracket search behind FindMaxBatchSize (batch_search.h): the largest
// candidate k in a range whose probe fits, given that the range's first
// does, under (near) monotonicity. Probes are memoized, and each next probe
// is estimated from the probes seen (where a peak or the extra compute
// crosses its budget), with a bisection whenever estimates stop halving the
// bracket: at most three probes per halving, one or two when the estimate
// is right.
#ifndef ECHO_PLANNER_SCHEDULE_BATCH_BRACKET_H_
#define ECHO_PLANNER_SCHEDULE_BATCH_BRACKET_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <utility>

#include "absl/status/statusor.h"
#include "planner/recompute/plan.h"

namespace echo::planner {

// One candidate, evaluated.
struct BatchProbe {
  bool fits = false;
  int64_t peak_bytes = 0;
  double overhead_ratio = 0;
};

using BatchProbes = std::map<int64_t, BatchProbe>;

// Where to probe inside the bracket (good, bad): good fits, bad does not or
// is the range's end + 1 (unseen). The caller clamps the answer into the
// bracket; none: bisect.
using BatchEstimate = std::function<std::optional<int64_t>(
    int64_t good, int64_t bad, const BatchProbes& seen)>;

// Peaks of one schedule grow about linearly with the batch: where the line
// through the bracket's peaks crosses `usable`; none unless both are seen
// and straddle it.
BatchEstimate PeakCrossing(int64_t usable);

// AUTO's extra compute grows with the batch (more bytes to free), faster
// than linearly (the cheapest bytes go first), from 0 at `zero_batch`, the
// fractional candidate where the plain peak crosses `usable`: where it
// crosses `ratio`. Between a fitting probe and one that fits the memory but
// misses on overhead, by interpolation, unless the miss rises over 4x
// steeper than the curve below (a jump: AUTO's plan changed; bisect);
// otherwise by extrapolating the two highest fitting probes (which
// overshoots on a convex curve, and so brackets the answer); the neighbour
// of a plain-schedule probe first.
BatchEstimate OverheadCrossing(int64_t usable, double ratio, double zero_batch);

class BatchBracketSearch {
 public:
  using Eval = std::function<absl::StatusOr<BatchProbe>(int64_t k)>;
  BatchBracketSearch(Eval eval, BatchEstimate estimate,
                     const Interrupt& interrupted)
      : eval_(std::move(eval)),
        estimate_(std::move(estimate)),
        interrupted_(interrupted) {}

  // Memoized; checks `interrupted` before each evaluation.
  absl::StatusOr<BatchProbe> At(int64_t k);

  // The largest k in [lo, hi] that fits, given that lo does. `gallop`:
  // probe lo + 1, 2, 4, ... first (when hi is a loose bound). `first`: a
  // guess to probe before anything else.
  absl::StatusOr<int64_t> Largest(int64_t lo, int64_t hi, bool gallop,
                                  std::optional<int64_t> first = {});

  const BatchProbes& seen() const { return seen_; }

 private:
  Eval eval_;
  BatchEstimate estimate_;
  const Interrupt& interrupted_;
  BatchProbes seen_;
};

}  // namespace echo::planner

#endif  // ECHO_PLANNER_SCHEDULE_BATCH_BRACKET_H_
