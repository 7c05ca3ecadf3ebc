// Range-add / range-max over a fixed array of int64, with the position of the
// maximum: the memory profile of a schedule, where each tensor instance adds
// its bytes over the interval of steps it lives.
#ifndef ECHO_PLANNER_RECOMPUTE_SEARCH_SEGMENT_TREE_H_
#define ECHO_PLANNER_RECOMPUTE_SEARCH_SEGMENT_TREE_H_

#include <cstdint>
#include <vector>

namespace echo::planner {

class MaxSegmentTree {
 public:
  // `size` zeros.
  explicit MaxSegmentTree(int32_t size = 0);
  // Replaces the contents (values.size() must equal size()).
  void Assign(const std::vector<int64_t>& values);

  int32_t size() const { return size_; }
  // Adds `delta` to positions lo..hi (inclusive); no-op when lo > hi.
  void Add(int32_t lo, int32_t hi, int64_t delta);
  int64_t Max() const { return size_ == 0 ? 0 : max_[1]; }
  // Leftmost position holding Max().
  int32_t ArgMax() const;
  // Max over lo..hi (inclusive); lo <= hi.
  int64_t RangeMax(int32_t lo, int32_t hi) const;
  int64_t Value(int32_t position) const;
  // Max over the odd positions (0 when there are none); branch and bound:
  // a subtree is entered only while it could beat the best found.
  int64_t OddMax() const;

 private:
  // Recomputes the ancestors of two leaves (node indices, first <= last).
  void Pull(int32_t first, int32_t last);
  int64_t RangeMax(int32_t node, int32_t node_lo, int32_t node_hi, int32_t lo,
                   int32_t hi) const;
  // OddMax below `node`, whose ancestors' pending adds sum to `above`.
  void OddMax(int32_t node, int64_t above, int64_t& best) const;

  int32_t size_ = 0;
  int32_t leaves_ = 1;  // power of two >= size_
  // max_[node]: max over the node's range, including pending_[node] and the
  // pending adds below it (but not those of its ancestors).
  std::vector<int64_t> max_;
  std::vector<int64_t> pending_;  // internal nodes only
};

}  // namespace echo::planner

#endif  // ECHO_PLANNER_RECOMPUTE_SEARCH_SEGMENT_TREE_H_
