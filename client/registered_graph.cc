#include "client/registered_graph.h"

#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace echo::client {
namespace {

absl::StatusOr<std::string> RegisterOnce(PlannerClient& client,
                                         const v1::Graph& graph) {
  v1::RegisterGraphRequest request;
  *request.mutable_graph() = graph;
  absl::StatusOr<v1::RegisterGraphResponse> response =
      client.RegisterGraph(request);
  if (!response.ok()) return response.status();
  return std::move(*response->mutable_graph_fingerprint());
}

}  // namespace

absl::StatusOr<RegisteredGraph> RegisteredGraph::Register(PlannerClient& client,
                                                          v1::Graph graph) {
  RegisteredGraph registered(client, std::move(graph));
  registered.has_graph_ = true;
  absl::StatusOr<std::string> fingerprint =
      RegisterOnce(client, registered.graph_);
  registered.registrations_ = 1;
  if (fingerprint.ok()) {
    registered.fingerprint_ = *std::move(fingerprint);
    return registered;
  }
  const absl::StatusCode code = fingerprint.status().code();
  if (code == absl::StatusCode::kResourceExhausted ||
      code == absl::StatusCode::kUnimplemented) {
    return registered;  // asked inline
  }
  return fingerprint.status();
}

RegisteredGraph RegisteredGraph::Known(PlannerClient& client,
                                       std::string fingerprint) {
  RegisteredGraph known(client, v1::Graph());
  known.fingerprint_ = std::move(fingerprint);
  return known;
}

bool RegisteredGraph::IsEvicted(const absl::Status& status) const {
  return has_graph_ && status.code() == absl::StatusCode::kNotFound &&
         absl::StrContains(status.message(), fingerprint_);
}

absl::Status RegisteredGraph::RegisterAgain() {
  absl::StatusOr<std::string> fingerprint = RegisterOnce(*client_, graph_);
  ++registrations_;
  if (!fingerprint.ok()) return fingerprint.status();
  if (*fingerprint != fingerprint_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "graph '", graph_.name(), "' was registered again as fingerprint ",
        *fingerprint, ", not ", fingerprint_, " as before"));
  }
  return absl::OkStatus();
}

}  // namespace echo::client
