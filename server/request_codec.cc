#include "server/request_codec.h"

#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/stubs/common.h"
#include "google/protobuf/wire_format_lite.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "grpcpp/support/proto_buffer_writer.h"

namespace echo::server {

namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::internal::WireFormatLite;

// Deeper than any Echo message nests; protobuf's own default limit.
constexpr int kMaxDepth = 100;
// Bytes of a bad string shown in the error.
constexpr size_t kShownBytes = 32;

absl::Status Invalid(const Descriptor& root, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("the request is not a valid ",
                                                 root.full_name(), ": ", what));
}

std::string Path(const std::string& parent, absl::string_view field) {
  return parent.empty() ? std::string(field) : absl::StrCat(parent, ".", field);
}

// Walks one message's wire data: each length-delimited field that the
// descriptor types as a string is checked for UTF-8, each message field is
// walked in turn.
absl::Status Walk(absl::string_view bytes, const Descriptor& type,
                  const std::string& path, int depth, const Descriptor& root) {
  if (depth > kMaxDepth) {
    return Invalid(root, absl::StrCat("messages nest deeper than ", kMaxDepth,
                                      " at ", path));
  }
  google::protobuf::io::CodedInputStream in(
      reinterpret_cast<const uint8_t*>(bytes.data()),
      static_cast<int>(bytes.size()));
  // Occurrences of each field so far: the index in a repeated field.
  std::vector<int> seen(type.field_count(), 0);
  const auto malformed = [&](absl::string_view at) {
    return Invalid(root,
                   absl::StrCat("malformed protobuf wire data in ",
                                at.empty() ? "the message" : at, " at byte ",
                                in.CurrentPosition(), " of ", bytes.size()));
  };
  while (in.CurrentPosition() < static_cast<int>(bytes.size())) {
    // Bytes remain, so a tag must follow: 0 is a bad or truncated one.
    const uint32_t tag = in.ReadTag();
    if (tag == 0) return malformed(path);
    const FieldDescriptor* field = type.FindFieldByNumber(
        static_cast<int>(WireFormatLite::GetTagFieldNumber(tag)));
    const bool delimited = WireFormatLite::GetTagWireType(tag) ==
                           WireFormatLite::WIRETYPE_LENGTH_DELIMITED;
    const bool walked = field != nullptr && delimited &&
                        (field->type() == FieldDescriptor::TYPE_STRING ||
                         field->type() == FieldDescriptor::TYPE_MESSAGE);
    if (!walked) {
      if (!WireFormatLite::SkipField(&in, tag)) return malformed(path);
      continue;
    }
    const int occurrence = seen[field->index()]++;
    const std::string field_path =
        field->is_repeated()
            ? Path(path, absl::StrCat(field->name(), "[", occurrence, "]"))
            : Path(path, field->name());
    uint32_t length = 0;
    if (!in.ReadVarint32(&length) || !in.Skip(static_cast<int>(length))) {
      return malformed(field_path);
    }
    const absl::string_view value =
        bytes.substr(in.CurrentPosition() - length, length);
    if (field->type() == FieldDescriptor::TYPE_STRING) {
      if (!google::protobuf::internal::IsStructurallyValidUTF8(
              value.data(), static_cast<int>(value.size()))) {
        return Invalid(
            root, absl::StrCat(
                      field_path,
                      " is not valid UTF-8 (string fields must be UTF-8); it "
                      "begins \"",
                      absl::CHexEscape(value.substr(0, kShownBytes)),
                      value.size() > kShownBytes ? "...\"" : "\""));
      }
    } else {
      const absl::Status nested =
          Walk(value, *field->message_type(), field_path, depth + 1, root);
      if (!nested.ok()) return nested;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status DiagnoseRequest(absl::string_view bytes,
                             const Descriptor& descriptor) {
  return Walk(bytes, descriptor, "", 0, descriptor);
}

absl::Status ParseRequest(const grpc::ByteBuffer& request,
                          google::protobuf::Message* message) {
  // A copy shares the slices; the reader consumes it, not the request.
  grpc::ByteBuffer copy(request);
  {
    grpc::ProtoBufferReader reader(&copy);
    if (reader.status().ok() && message->ParseFromZeroCopyStream(&reader)) {
      return absl::OkStatus();
    }
  }
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (request.Dump(&slices).ok()) {
    for (const grpc::Slice& slice : slices) {
      bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
    }
  }
  const Descriptor& descriptor = *message->GetDescriptor();
  absl::Status diagnosis = DiagnoseRequest(bytes, descriptor);
  if (!diagnosis.ok()) return diagnosis;
  return Invalid(descriptor, "the bytes do not parse as that message");
}

absl::Status SerializeResponse(const google::protobuf::Message& response,
                               grpc::ByteBuffer* out) {
  bool own_buffer = false;
  const grpc::Status status =
      grpc::SerializationTraits<google::protobuf::Message>::Serialize(
          response, out, &own_buffer);
  if (!status.ok()) {
    return absl::InternalError(absl::StrCat("cannot serialize the ",
                                            response.GetTypeName(), ": ",
                                            status.error_message()));
  }
  return absl::OkStatus();
}

}  // namespace echo::server
