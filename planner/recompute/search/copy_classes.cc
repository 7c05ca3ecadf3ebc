#include "planner/recompute/search/copy_classes.h"

#include <cstring>
#include <functional>
#include <string>

#include "absl/container/flat_hash_map.h"

namespace echo::planner {
namespace {

uint64_t Mix(uint64_t seed, uint64_t value) {
  // splitmix64's finaliser over the running hash.
  uint64_t x =
      seed ^ (value + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2));
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t Bits(double value) {
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

}  // namespace

std::vector<int32_t> CopyClasses(const RecomputeProblem& problem,
                                 int32_t rounds) {
  const Graph& graph = problem.graph;
  const int32_t num_ops = graph.num_ops();
  // Each op's own label, and the edges in flat arrays (CSR) read every
  // round: its input producers in argument order (kNoOp: a graph input),
  // then its readers, output by output (kNoOp ends an output's).
  std::vector<uint64_t> label(num_ops);
  std::vector<int32_t> begin(num_ops + 1, 0);
  std::vector<int32_t> readers_begin(num_ops);
  std::vector<int32_t> edges;
  edges.reserve(4 * static_cast<size_t>(num_ops));
  for (OpIndex o = 0; o < num_ops; ++o) {
    const Op& op = graph.op(o);
    uint64_t h = std::hash<std::string>()(op.op_type);
    h = Mix(h, static_cast<uint64_t>(op.phase));
    h = Mix(h, Bits(problem.op_costs[o]));
    h = Mix(h, problem.can_clone[o] * 2 + problem.eligible[o]);
    h = Mix(h, op.inputs.size());
    begin[o] = static_cast<int32_t>(edges.size());
    for (TensorIndex t : op.inputs) edges.push_back(graph.tensor(t).producer);
    readers_begin[o] = static_cast<int32_t>(edges.size());
    for (TensorIndex t : op.outputs) {
      const Tensor& tensor = graph.tensor(t);
      h = Mix(h, static_cast<uint64_t>(problem.tensor_bytes[t]));
      h = Mix(h, tensor.remade_on_recompute);
      h = Mix(h, tensor.readers.size());
      h = Mix(h, problem.split_reader[t]);
      edges.insert(edges.end(), tensor.readers.begin(), tensor.readers.end());
      edges.push_back(kNoOp);
    }
    label[o] = h;
  }
  begin[num_ops] = static_cast<int32_t>(edges.size());
  std::vector<uint64_t> next(num_ops);
  for (int32_t round = 0; round < rounds; ++round) {
    for (OpIndex o = 0; o < num_ops; ++o) {
      uint64_t h = label[o];
      int32_t e = begin[o];
      for (; e < readers_begin[o]; ++e) {
        h = Mix(h, edges[e] < 0 ? 0 : label[edges[e]]);
      }
      // Readers as a multiset (a sum of their mixed labels): their order in
      // the graph carries no structure beyond what their labels say.
      uint64_t readers = 0;
      for (; e < begin[o + 1]; ++e) {
        if (edges[e] < 0) {
          h = Mix(h, readers);
          readers = 0;
        } else {
          readers += Mix(0, label[edges[e]]);
        }
      }
      next[o] = h;
    }
    label.swap(next);
  }
  absl::flat_hash_map<uint64_t, int32_t> ids;
  ids.reserve(num_ops);
  std::vector<int32_t> classes(num_ops);
  for (OpIndex o = 0; o < num_ops; ++o) {
    classes[o] = ids.try_emplace(label[o], static_cast<int32_t>(ids.size()))
                     .first->second;
  }
  return classes;
}

}  // namespace echo::planner
