// Finds the chunkable regions of a graph (chunk_region.h says what one is
// and what is proven of it): one per loss it can prove, and why not for the
// others.
#ifndef ECHO_PLANNER_CHUNK_CHUNK_SEARCH_H_
#define ECHO_PLANNER_CHUNK_CHUNK_SEARCH_H_

#include <string>
#include <vector>

#include "planner/chunk/chunk_region.h"
#include "planner/graph.h"

namespace echo::planner {

struct ChunkRegionSearch {
  std::vector<ChunkRegion> regions;
  // Per loss op left alone, why (naming it), for reports.
  std::vector<std::string> rejected;
};

// Every chunkable region of the graph; regions are disjoint.
ChunkRegionSearch FindChunkRegions(const Graph& graph);

}  // namespace echo::planner

#endif  // ECHO_PLANNER_CHUNK_CHUNK_SEARCH_H_
