#include "planner/recompute/search/segment_tree.h"

#include <algorithm>
#include <limits>

namespace echo::planner {
namespace {
// Padding leaves never win a max.
constexpr int64_t kPadding = std::numeric_limits<int64_t>::min() / 4;
}  // namespace

MaxSegmentTree::MaxSegmentTree(int32_t size) {
  Assign(std::vector<int64_t>(size, 0));
}

void MaxSegmentTree::Assign(const std::vector<int64_t>& values) {
  size_ = static_cast<int32_t>(values.size());
  leaves_ = 1;
  while (leaves_ < size_) leaves_ *= 2;
  max_.assign(2 * leaves_, kPadding);
  pending_.assign(leaves_, 0);
  std::copy(values.begin(), values.end(), max_.begin() + leaves_);
  for (int32_t node = leaves_ - 1; node >= 1; --node) {
    max_[node] = std::max(max_[2 * node], max_[2 * node + 1]);
  }
}

void MaxSegmentTree::Pull(int32_t first, int32_t last) {
  // Both leaves' ancestors, level by level: above the paths' meeting point
  // each node is recomputed once.
  for (first /= 2, last /= 2; first >= 1; first /= 2, last /= 2) {
    max_[first] =
        std::max(max_[2 * first], max_[2 * first + 1]) + pending_[first];
    if (last != first) {
      max_[last] =
          std::max(max_[2 * last], max_[2 * last + 1]) + pending_[last];
    }
  }
}

void MaxSegmentTree::Add(int32_t lo, int32_t hi, int64_t delta) {
  if (lo > hi || delta == 0) return;
  int32_t left = lo + leaves_;
  int32_t right = hi + leaves_ + 1;
  const int32_t first = left;
  const int32_t last = right - 1;
  while (left < right) {
    if (left & 1) {
      max_[left] += delta;
      if (left < leaves_) pending_[left] += delta;
      ++left;
    }
    if (right & 1) {
      --right;
      max_[right] += delta;
      if (right < leaves_) pending_[right] += delta;
    }
    left /= 2;
    right /= 2;
  }
  Pull(first, last);
}

int32_t MaxSegmentTree::ArgMax() const {
  int32_t node = 1;
  while (node < leaves_) {
    node = max_[2 * node] >= max_[2 * node + 1] ? 2 * node : 2 * node + 1;
  }
  return node - leaves_;
}

int64_t MaxSegmentTree::Value(int32_t position) const {
  int32_t node = position + leaves_;
  int64_t value = max_[node];
  for (node /= 2; node >= 1; node /= 2) value += pending_[node];
  return value;
}

int64_t MaxSegmentTree::OddMax() const {
  if (size_ < 2) return 0;
  int64_t best = kPadding;
  OddMax(1, 0, best);
  return best;
}

void MaxSegmentTree::OddMax(int32_t node, int64_t above, int64_t& best) const {
  if (max_[node] + above <= best) return;
  if (node >= leaves_) {
    if ((node - leaves_) % 2 == 1) best = max_[node] + above;
    return;
  }
  // Leaves sit at the bottom, so a node's value includes its own pending
  // add: its children see it in `above`.
  above += pending_[node];
  // The larger child first, so that the other is usually cut.
  const int32_t first =
      max_[2 * node] >= max_[2 * node + 1] ? 2 * node : 2 * node + 1;
  OddMax(first, above, best);
  OddMax(first ^ 1, above, best);
}

int64_t MaxSegmentTree::RangeMax(int32_t lo, int32_t hi) const {
  return RangeMax(1, 0, leaves_ - 1, lo, hi);
}

int64_t MaxSegmentTree::RangeMax(int32_t node, int32_t node_lo, int32_t node_hi,
                                 int32_t lo, int32_t hi) const {
  if (lo <= node_lo && node_hi <= hi) return max_[node];
  const int32_t mid = (node_lo + node_hi) / 2;
  int64_t best = kPadding;
  if (lo <= mid) best = RangeMax(2 * node, node_lo, mid, lo, hi);
  if (hi > mid) {
    best = std::max(best, RangeMax(2 * node + 1, mid + 1, node_hi, lo, hi));
  }
  return best + pending_[node];
}

}  // namespace echo::planner
