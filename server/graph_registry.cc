#include "server/graph_registry.h"

#include <openssl/evp.h>

#include <algorithm>
#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "adapter/graph_convert.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "planner/status_macros.h"

namespace echo::server {
namespace {

std::string DeterministicBytes(const google::protobuf::Message& message) {
  std::string out;
  google::protobuf::io::StringOutputStream stream(&out);
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.SetSerializationDeterministic(true);
  message.SerializeToCodedStream(&coded);
  coded.Trim();
  return out;
}

std::optional<CacheMetrics> MetricsFor(ServerMetrics* metrics,
                                       const std::string& cache) {
  if (metrics == nullptr) return std::nullopt;
  return metrics->ForCache(cache);
}

// Per-entry overhead of a hash-map index entry or a map node.
constexpr int64_t kIndexEntryBytes = 48;

}  // namespace

std::string Sha256Hex(absl::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_Digest(data.data(), data.size(), digest, &length, EVP_sha256(), nullptr);
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(digest), length));
}

std::string CanonicalGraphBytes(const v1::Graph& graph) {
  v1::Graph canonical = graph;
  canonical.DiscardUnknownFields();
  auto* tensors = canonical.mutable_tensors();
  std::stable_sort(
      tensors->begin(), tensors->end(),
      [](const v1::Tensor& a, const v1::Tensor& b) { return a.id() < b.id(); });
  return DeterministicBytes(canonical);
}

std::string GraphFingerprint(const v1::Graph& graph) {
  return Sha256Hex(CanonicalGraphBytes(graph));
}

int64_t GraphMemoryBytes(const planner::Graph& graph) {
  auto string_bytes = [](const std::string& s) {
    return static_cast<int64_t>(s.capacity());
  };
  int64_t bytes = sizeof(planner::Graph) + string_bytes(graph.name());
  for (const planner::Tensor& t : graph.tensors()) {
    bytes += sizeof(planner::Tensor) + string_bytes(t.id) +
             string_bytes(t.name) + kIndexEntryBytes +
             static_cast<int64_t>(t.shape.capacity() * sizeof(int64_t) +
                                  t.readers.capacity() * sizeof(int32_t));
  }
  for (const planner::Op& op : graph.ops()) {
    bytes += sizeof(planner::Op) + string_bytes(op.id) + string_bytes(op.name) +
             string_bytes(op.op_type) + string_bytes(op.measured_on) +
             kIndexEntryBytes +
             static_cast<int64_t>((op.inputs.capacity() +
                                   op.distinct_inputs.capacity() +
                                   op.outputs.capacity()) *
                                  sizeof(int32_t));
    for (const auto& [key, value] : op.attributes) {
      bytes += kIndexEntryBytes + string_bytes(key) + string_bytes(value);
    }
  }
  for (const auto& [key, value] : graph.metadata()) {
    bytes += kIndexEntryBytes + string_bytes(key) + string_bytes(value);
  }
  return bytes;
}

GraphRegistry::GraphRegistry(int64_t graph_cache_bytes,
                             int64_t answer_cache_bytes, ServerMetrics* metrics)
    : graphs_(graph_cache_bytes, MetricsFor(metrics, "graph")),
      answers_(answer_cache_bytes, MetricsFor(metrics, "answer")) {}

absl::StatusOr<GraphRegistry::Registration> GraphRegistry::Register(
    const v1::Graph& graph) {
  Registration registration;
  registration.ref.fingerprint = GraphFingerprint(graph);
  // Already registered (the fingerprint covers every field): refresh the
  // entry and skip the conversion, most of a re-registration's cost.
  // Contains first, so that a first registration counts no cache miss.
  if (graphs_.Contains(registration.ref.fingerprint)) {
    if (std::optional<std::shared_ptr<const planner::Graph>> found =
            graphs_.Find(registration.ref.fingerprint)) {
      registration.ref.graph = *std::move(found);
      registration.charged_bytes = GraphMemoryBytes(*registration.ref.graph);
      return registration;  // newly_registered: false
    }
  }
  ASSIGN_OR_RETURN(planner::Graph converted, adapter::GraphFromProto(graph));
  auto shared = std::make_shared<const planner::Graph>(std::move(converted));
  registration.charged_bytes = GraphMemoryBytes(*shared);
  // Re-registering refreshes the entry (most recently used again).
  registration.newly_registered =
      !graphs_.Contains(registration.ref.fingerprint);
  if (!graphs_.Insert(registration.ref.fingerprint, shared,
                      registration.charged_bytes)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "graph '", graph.name(), "' needs ", registration.charged_bytes,
        " bytes in the registry, more than its --graph_cache_bytes of ",
        graphs_.capacity_bytes()));
  }
  registration.ref.graph = std::move(shared);
  return registration;
}

absl::StatusOr<GraphRef> GraphRegistry::Resolve(
    const v1::Graph* graph, const std::string& fingerprint) {
  if (graph != nullptr && !fingerprint.empty()) {
    return absl::InvalidArgumentError(
        "give either graph or graph_fingerprint, not both");
  }
  if (!fingerprint.empty()) {
    std::optional<std::shared_ptr<const planner::Graph>> found =
        graphs_.Find(fingerprint);
    if (!found) {
      return absl::NotFoundError(absl::StrCat(
          "graph fingerprint '", fingerprint,
          "' is not registered (never registered, or evicted from the "
          "registry): call RegisterGraph again"));
    }
    return GraphRef{fingerprint, *std::move(found)};
  }
  if (graph == nullptr) {
    return absl::InvalidArgumentError(
        "the request has neither graph nor graph_fingerprint");
  }
  // No status macro on the request's way (server/planner_service.cc).
  absl::StatusOr<planner::Graph> converted = adapter::GraphFromProto(*graph);
  if (!converted.ok()) return converted.status();
  return GraphRef{
      "", std::make_shared<const planner::Graph>(*std::move(converted))};
}

std::string GraphRegistry::AnswerKey(absl::string_view method,
                                     const google::protobuf::Message& request) {
  return absl::StrCat(method, "\n", DeterministicBytes(request));
}

std::optional<std::string> GraphRegistry::FindAnswer(const std::string& key) {
  return answers_.Find(key);
}

void GraphRegistry::StoreAnswer(const std::string& key,
                                std::string serialized_response) {
  const int64_t bytes = static_cast<int64_t>(
      key.size() + serialized_response.size() + kIndexEntryBytes);
  answers_.Insert(key, std::move(serialized_response), bytes);
}

}  // namespace echo::server
