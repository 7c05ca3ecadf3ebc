// A graph asked about several times by fingerprint: registered once
// (RegisterGraph), so that the graph crosses the wire once however many
// questions follow. A fingerprint the server evicted meanwhile (NOT_FOUND
// naming it) is registered again and the question asked once more. A server
// that cannot keep the graph (RESOURCE_EXHAUSTED: larger than its
// --graph_cache_bytes, or busy; UNIMPLEMENTED: an echod without a registry)
// is asked with the graph inline instead, as before registration existed.
#ifndef ECHO_CLIENT_REGISTERED_GRAPH_H_
#define ECHO_CLIENT_REGISTERED_GRAPH_H_

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/planner_client.h"
#include "echo/v1/graph.pb.h"

namespace echo::client {

class RegisteredGraph {
 public:
  // Registers `graph` with the server `client` talks to (which must outlive
  // this object); the server's error when it refuses it for any reason but
  // those above.
  static absl::StatusOr<RegisteredGraph> Register(PlannerClient& client,
                                                  v1::Graph graph);
  // A fingerprint (not empty) registered before (`echoctl register`): asked
  // as is, never registered again (there is no graph to send).
  static RegisteredGraph Known(PlannerClient& client, std::string fingerprint);

  // Empty when the graph is sent inline.
  const std::string& fingerprint() const { return fingerprint_; }
  // RegisterGraph calls made so far.
  int registrations() const { return registrations_; }

  // `request` with graph_fingerprint set (or the graph, see above), sent
  // through `method`, e.g. Ask(&PlannerClient::EstimateMemory, request).
  template <typename Request, typename Response>
  absl::StatusOr<Response> Ask(
      absl::StatusOr<Response> (PlannerClient::*method)(const Request&),
      Request request) {
    if (fingerprint_.empty()) {
      *request.mutable_graph() = graph_;
      return (client_->*method)(request);
    }
    request.clear_graph();
    request.set_graph_fingerprint(fingerprint_);
    absl::StatusOr<Response> response = (client_->*method)(request);
    if (!IsEvicted(response.status())) return response;
    if (absl::Status again = RegisterAgain(); !again.ok()) return again;
    return (client_->*method)(request);
  }

 private:
  RegisteredGraph(PlannerClient& client, v1::Graph graph)
      : client_(&client), graph_(std::move(graph)) {}

  // NOT_FOUND naming this fingerprint, from a graph we can send again (a
  // NOT_FOUND about anything else, e.g. an unknown device, is the answer).
  bool IsEvicted(const absl::Status& status) const;
  // RegisterGraph with graph_; FAILED_PRECONDITION when the server gives
  // another fingerprint than before.
  absl::Status RegisterAgain();

  PlannerClient* client_;
  v1::Graph graph_;
  bool has_graph_ = false;
  std::string fingerprint_;
  int registrations_ = 0;
};

}  // namespace echo::client

#endif  // ECHO_CLIENT_REGISTERED_GRAPH_H_
