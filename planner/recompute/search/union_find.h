// Disjoint sets over 0..n-1 with path halving: the groups of ops that the
// recompute passes merge (ECHO's regions and groups, a plan's recompute
// regions, the stash cut's independent groups).
#ifndef ECHO_PLANNER_RECOMPUTE_SEARCH_UNION_FIND_H_
#define ECHO_PLANNER_RECOMPUTE_SEARCH_UNION_FIND_H_

#include <cstdint>
#include <numeric>
#include <vector>

namespace echo::planner {

class UnionFind {
 public:
  explicit UnionFind(int32_t n = 0) { Reset(n); }
  // n singletons again, reusing the storage (a caller with many small sets).
  void Reset(int32_t n) {
    parent_.resize(n);
    std::iota(parent_.begin(), parent_.end(), 0);
  }
  int32_t Find(int32_t x) {
    while (parent_[x] != x) x = parent_[x] = parent_[parent_[x]];
    return x;
  }
  // a's set joins b's (b's root stays the root).
  void Union(int32_t a, int32_t b) { parent_[Find(a)] = Find(b); }

 private:
  std::vector<int32_t> parent_;
};

}  // namespace echo::planner

#endif  // ECHO_PLANNER_RECOMPUTE_SEARCH_UNION_FIND_H_
