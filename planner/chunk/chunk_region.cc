#include "planner/chunk/chunk_region.h"

#include <algorithm>

namespace echo::planner {

int64_t ChunkRegion::BlockOf(OpIndex o) const {
  auto it =
      std::lower_bound(block_ops.begin(), block_ops.end(), o,
                       [](const BlockOp& b, OpIndex op) { return b.op < op; });
  return it != block_ops.end() && it->op == o ? it->first_row : -1;
}

}  // namespace echo::planner
