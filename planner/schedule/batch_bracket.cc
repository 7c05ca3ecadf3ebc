#include "planner/schedule/batch_bracket.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <utility>

#include "planner/status_macros.h"

namespace echo::planner {
namespace {

// Above this many times the slope below a fitting probe, the rise to a probe
// that misses on overhead is taken for a jump, not a curve. A smooth convex
// curve passes it only in a wide bracket, where bisecting costs a probe or
// two, not the answer.
constexpr double kJumpSlopeFactor = 4;

// A double estimate as a candidate; the caller clamps it into the bracket.
std::optional<int64_t> ToCandidate(double k) {
  if (!std::isfinite(k)) return std::nullopt;
  return static_cast<int64_t>(std::floor(std::clamp(k, -1e18, 1e18)));
}

}  // namespace

BatchEstimate PeakCrossing(int64_t usable) {
  return [usable](int64_t good, int64_t bad,
                  const BatchProbes& seen) -> std::optional<int64_t> {
    auto g = seen.find(good);
    auto b = seen.find(bad);
    if (g == seen.end() || b == seen.end()) return std::nullopt;
    const double low = static_cast<double>(g->second.peak_bytes);
    const double high = static_cast<double>(b->second.peak_bytes);
    const double target = static_cast<double>(usable);
    if (!(low <= target && target < high)) return std::nullopt;
    return ToCandidate(static_cast<double>(good) +
                       (target - low) / (high - low) *
                           static_cast<double>(bad - good));
  };
}

BatchEstimate OverheadCrossing(int64_t usable, double ratio,
                               double zero_batch) {
  return [=](int64_t good, int64_t bad,
             const BatchProbes& seen) -> std::optional<int64_t> {
    auto g = seen.find(good);
    if (g == seen.end()) return std::nullopt;
    // A point (batch, ratio) of the curve. The plain schedule's (no extra
    // compute) stand at zero_batch: the curve starts where the plain peak
    // stops fitting.
    auto point = [&](int64_t k, const BatchProbe& p) {
      if (p.overhead_ratio > 0) {
        return std::make_pair(static_cast<double>(k), p.overhead_ratio);
      }
      return std::make_pair(std::max(static_cast<double>(k), zero_batch), 0.0);
    };
    const auto [xg, rg] = point(good, g->second);
    std::pair<double, double> lower = {zero_batch, 0.0};
    for (auto it = std::make_reverse_iterator(g); it != seen.rend(); ++it) {
      if (it->second.fits) {
        lower = point(it->first, it->second);
        break;
      }
    }
    const auto [xl, rl] = lower;
    auto b = seen.find(bad);
    if (b != seen.end() && b->second.peak_bytes <= usable &&
        b->second.overhead_ratio > ratio && xg < static_cast<double>(bad)) {
      const double xb = static_cast<double>(bad);
      const double rb = b->second.overhead_ratio;
      // A jump (AUTO's plan changes: DeepSpeech2's 4.8% -> 14.5% between
      // two batches) rather than a curve: the line to it hugs `good` and
      // the bracket shrinks by a sliver per plan: bisect.
      if (rg > rl && xg > xl &&
          (rb - rg) / (xb - xg) > kJumpSlopeFactor * (rg - rl) / (xg - xl)) {
        return std::nullopt;
      }
      return ToCandidate(xg + (ratio - rg) / (rb - rg) * (xb - xg));
    }
    if (rg <= 0) return good + 1;  // a first point with extra compute
    if (!(rg > rl && xg > xl)) return std::nullopt;
    // At or past a bad probe (not the range's end, the best bet then), the
    // same line would only creep down from it: bisect instead.
    const double k = xg + (ratio - rg) * (xg - xl) / (rg - rl);
    if (b != seen.end() && !(k < static_cast<double>(bad))) return std::nullopt;
    return ToCandidate(k);
  };
}

absl::StatusOr<BatchProbe> BatchBracketSearch::At(int64_t k) {
  if (auto it = seen_.find(k); it != seen_.end()) return it->second;
  if (interrupted_) RETURN_IF_ERROR(interrupted_());
  ASSIGN_OR_RETURN(BatchProbe probe, eval_(k));
  seen_.emplace(k, probe);
  return probe;
}

absl::StatusOr<int64_t> BatchBracketSearch::Largest(
    int64_t lo, int64_t hi, bool gallop, std::optional<int64_t> first) {
  int64_t good = lo;
  int64_t bad = hi + 1;
  if (first.has_value() && good < *first && *first < bad) {
    ASSIGN_OR_RETURN(const BatchProbe probe, At(*first));
    (probe.fits ? good : bad) = *first;
  }
  for (int64_t step = 1; gallop && bad - good > 1;) {
    const int64_t k = std::min(bad - 1, good + step);
    ASSIGN_OR_RETURN(const BatchProbe probe, At(k));
    if (!probe.fits) {
      bad = k;
      break;
    }
    good = k;
    step = step > hi ? hi : step * 2;
  }
  // Estimates while they halve the bracket; after two probes that did
  // not, a bisection (which does). A right estimate ends in two probes: the
  // answer, then its neighbour (the estimate clamped into the bracket).
  int64_t width = bad - good;
  int since_halved = 0;
  while (bad - good > 1) {
    int64_t k = good + (bad - good) / 2;
    if (since_halved < 2) {
      if (std::optional<int64_t> estimate = estimate_(good, bad, seen_)) {
        k = std::clamp(*estimate, good + 1, bad - 1);
      }
    }
    ASSIGN_OR_RETURN(const BatchProbe probe, At(k));
    (probe.fits ? good : bad) = k;
    if (2 * (bad - good) <= width) {
      width = bad - good;
      since_halved = 0;
    } else {
      ++since_halved;
    }
  }
  return good;
}

}  // namespace echo::planner
