// The graph registry: clients register a graph once (RegisterGraph) and then
// send its fingerprint instead of the graph. Holds the converted planner IR
// in a bounded LRU, and a second bounded LRU of answers (plans, fit checks,
// estimates) keyed by the fingerprint and every option of the request.
//
// Fingerprint: lower-case hex SHA-256 (OpenSSL libcrypto) of the graph's
// canonical serialization: the Graph proto with its tensors sorted by id (the
// tensor list's order means nothing: ops name tensors by id; the op list's
// order is the schedule and is kept), unknown fields dropped, serialized
// deterministically (map fields, i.e. attributes and metadata, sorted by
// key). Every field, the graph name and metadata included, is part of it.
#ifndef ECHO_SERVER_GRAPH_REGISTRY_H_
#define ECHO_SERVER_GRAPH_REGISTRY_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "echo/v1/graph.pb.h"
#include "google/protobuf/message.h"
#include "planner/graph.h"
#include "server/bytes_lru.h"
#include "server/metrics.h"

namespace echo::server {

// --graph_cache_bytes and --answer_cache_bytes defaults.
inline constexpr int64_t kDefaultGraphCacheBytes = int64_t{512} << 20;
inline constexpr int64_t kDefaultAnswerCacheBytes = int64_t{64} << 20;

// Lower-case hex SHA-256 of `data`.
std::string Sha256Hex(absl::string_view data);
// The canonical serialization described above.
std::string CanonicalGraphBytes(const v1::Graph& graph);
std::string GraphFingerprint(const v1::Graph& graph);
// What a graph in the IR costs in memory (strings, vectors, indexes): what
// the registry charges it.
int64_t GraphMemoryBytes(const planner::Graph& graph);

// A request's graph: registered (fingerprint set) or sent inline.
struct GraphRef {
  std::string fingerprint;  // empty for an inline graph
  std::shared_ptr<const planner::Graph> graph;
};

class GraphRegistry {
 public:
  // `metrics` may be null.
  GraphRegistry(int64_t graph_cache_bytes, int64_t answer_cache_bytes,
                ServerMetrics* metrics);

  struct Registration {
    GraphRef ref;
    bool newly_registered = false;
    int64_t charged_bytes = 0;
  };
  // INVALID_ARGUMENT for a malformed graph; RESOURCE_EXHAUSTED when the
  // graph alone is larger than the registry.
  absl::StatusOr<Registration> Register(const v1::Graph& graph);

  // The one way a handler gets its graph: exactly one of `graph` (null when
  // the request has none) and `fingerprint`. INVALID_ARGUMENT for both or
  // neither or a malformed graph, NOT_FOUND naming the fingerprint when it
  // was never registered or was evicted.
  absl::StatusOr<GraphRef> Resolve(const v1::Graph* graph,
                                   const std::string& fingerprint);

  // Answers: the key is the method and the request's deterministic
  // serialization (fingerprint and every option), so any option that
  // changes the answer changes the key.
  static std::string AnswerKey(absl::string_view method,
                               const google::protobuf::Message& request);
  std::optional<std::string> FindAnswer(const std::string& key);
  void StoreAnswer(const std::string& key, std::string serialized_response);
  // Op costs changed (a profile was taken): cached answers may be stale.
  void ClearAnswers() { answers_.Clear(); }

  CacheStats graph_stats() const { return graphs_.stats(); }

 private:
  BytesLru<std::shared_ptr<const planner::Graph>> graphs_;
  BytesLru<std::string> answers_;
};

}  // namespace echo::server

#endif  // ECHO_SERVER_GRAPH_REGISTRY_H_
