// Request bytes to messages and responses back, for the service's raw
// handlers. gRPC's own deserialization answers a request it cannot parse
// (malformed wire data, or a proto3 string field holding bytes that are not
// UTF-8) with UNIMPLEMENTED and no message, before any handler or metric sees
// it; parsing here lets such a request get INVALID_ARGUMENT naming the field.
#ifndef ECHO_SERVER_REQUEST_CODEC_H_
#define ECHO_SERVER_REQUEST_CODEC_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"
#include "grpcpp/support/byte_buffer.h"

namespace echo::server {

// Parses `request` into `message`. On failure INVALID_ARGUMENT naming the
// message type and what is wrong (DiagnoseRequest).
absl::Status ParseRequest(const grpc::ByteBuffer& request,
                          google::protobuf::Message* message);

// Why `bytes` does not parse as `descriptor`: INVALID_ARGUMENT naming the
// first string field that is not UTF-8 by its path (e.g.
// "graph.ops[3].input_ids[0]") with an escaped prefix of its bytes, or the
// path and byte offset where the wire data stops being protobuf. OK when the
// walk finds neither. Linear in the size times the nesting depth.
absl::Status DiagnoseRequest(absl::string_view bytes,
                             const google::protobuf::Descriptor& descriptor);

// Serializes `response` into `out`; INTERNAL when it cannot.
absl::Status SerializeResponse(const google::protobuf::Message& response,
                               grpc::ByteBuffer* out);

}  // namespace echo::server

#endif  // ECHO_SERVER_REQUEST_CODEC_H_
