// What echoctl_commands.cc and echoctl_fit_commands.cc share: kept request
// and response messages, the request's graph and the JSON output.
#ifndef ECHO_CLIENT_ECHOCTL_COMMANDS_INTERNAL_H_
#define ECHO_CLIENT_ECHOCTL_COMMANDS_INTERNAL_H_

#include <memory>
#include <utility>
#include <vector>

#include "client/echoctl_commands.h"
#include "google/protobuf/message.h"

namespace echo::client {

// echoctl runs one command and exits, so a message holding a graph or a
// schedule is left for the OS to reclaim, as compilers leave their ASTs
// (clang -disable-free): freeing a 100k-op graph's request field by field
// took ~70 ms of echoctl's wall time. Reachable from a static, so leak
// checkers do not count it.
template <typename Message>
Message& KeptUntilExit(Message message = Message()) {
  static auto* const kept =
      new std::vector<std::unique_ptr<google::protobuf::Message>>();
  kept->push_back(std::make_unique<Message>(std::move(message)));
  return static_cast<Message&>(*kept->back());
}

// The request's graph: --fingerprint, or --graph loaded (false after
// printing why it could not be).
template <typename Request>
bool SetGraph(const EchoctlFlags& flags, Request* request) {
  if (!flags.fingerprint.empty()) {
    request->set_graph_fingerprint(flags.fingerprint);
    return true;
  }
  return LoadGraph(flags, request->mutable_graph());
}

// --output json: the message as proto3 JSON, with the .proto's field names
// and its default values, on stdout.
void PrintJson(const google::protobuf::Message& message);

}  // namespace echo::client

#endif  // ECHO_CLIENT_ECHOCTL_COMMANDS_INTERNAL_H_
