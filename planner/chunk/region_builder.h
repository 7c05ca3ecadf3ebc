// Grows a chunkable region (chunk_region.h) from its forward chain into the
// backward, and proves it row-independent or says why not. Internal to
// planner/chunk: FindChunkRegions (chunk_search.h) finds the chains.
#ifndef ECHO_PLANNER_CHUNK_REGION_BUILDER_H_
#define ECHO_PLANNER_CHUNK_REGION_BUILDER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "planner/chunk/chunk_region.h"
#include "planner/chunk/row_rules.h"
#include "planner/graph.h"

namespace echo::planner {

class RegionBuilder {
 public:
  // Forward ops of the steps a stack joins: op -> the first row of its
  // block.
  using Blocks = std::map<OpIndex, int64_t>;

  RegionBuilder(const Graph& graph, int64_t rows)
      : graph_(graph), rows_(graph, rows) {}

  const RowRules& rows() const { return rows_; }

  // Grows the region from the forward `chain` (graph order, ending in the
  // loss op; `blocks` its ops on steps of `block_rows` rows) into the
  // backward. Nullopt (with `why`) when it cannot be proven
  // row-independent. With `blocks_allowed` false, selects of the rows stay
  // outside (the rows' gradient leaves whole).
  std::optional<ChunkRegion> Close(const std::vector<OpIndex>& chain,
                                   const Blocks& blocks, int64_t block_rows,
                                   bool blocks_allowed, std::string* why);

 private:
  std::optional<ChunkRegion> Refuse(std::string* why, TensorIndex t,
                                    const std::string& what) const;
  void Join(OpIndex o, int64_t block, std::vector<OpIndex>& ops);
  int64_t BlockOfTensor(TensorIndex t) const;
  const RowRules& RulesOf(TensorIndex t) const;
  RowRules& MutableRulesOf(TensorIndex t);
  bool JoinsBlock(OpIndex select, TensorIndex t, ChunkRegion& region);
  void JoinSums(ChunkRegion& region, std::set<TensorIndex>& gradients);
  bool HandOnStorage(ChunkRegion& region, std::set<TensorIndex>& gradients,
                     std::string* why);
  bool PullBackwardViews(ChunkRegion& region, std::string* why);
  bool CheckBlocks(ChunkRegion& region, std::string* why) const;
  bool IsNeverSent(TensorIndex t) const;
  bool IsZeroByteView(OpIndex o, OpIndex step) const;
  bool AliveAtLoss(TensorIndex t, OpIndex step) const;
  bool CollectTensors(ChunkRegion& region, std::string* why) const;
  bool ReadOutside(TensorIndex t) const;

  const Graph& graph_;
  RowRules rows_;
  std::optional<RowRules> block_rules_;
  std::set<OpIndex> region_ops_;
  Blocks block_of_;
  std::set<TensorIndex> summed_;
  bool blocks_allowed_ = true;
};

}  // namespace echo::planner

#endif  // ECHO_PLANNER_CHUNK_REGION_BUILDER_H_
