#include "planner/graph_limits.h"

#include "absl/strings/str_cat.h"
#include "planner/status_macros.h"

namespace echo::planner {

namespace {

constexpr size_t kShownIdBytes = 64;

// Who a limit is on, e.g. "op 'mm_3'", spelled out only for an error (the
// checks run for every op and tensor of a 1M-op graph).
struct Owner {
  absl::string_view kind;
  absl::string_view id;
};

std::string OwnerText(absl::string_view owner) { return std::string(owner); }
std::string OwnerText(const Owner& owner) {
  return absl::StrCat(owner.kind, " '", owner.id, "'");
}

// "<what> is <size> bytes (limit <limit>)" when over, else OK.
template <typename O>
absl::Status CheckBytes(const O& owner, absl::string_view what, size_t size,
                        size_t limit) {
  if (size <= limit) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(OwnerText(owner), ": ", what,
                                                 " is ", size, " bytes (limit ",
                                                 limit, ")"));
}

template <typename O>
absl::Status CheckCount(const O& owner, absl::string_view what, size_t count,
                        size_t limit) {
  if (count <= limit) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      OwnerText(owner), ": ", count, " ", what, " (limit ", limit, ")"));
}

// The owner's id, or its position when the id itself is over the limit.
absl::Status CheckId(absl::string_view kind, const std::string& id,
                     size_t index) {
  if (id.size() <= kMaxIdBytes) return absl::OkStatus();
  return CheckBytes(absl::StrCat(kind, " #", index, " '", ShortId(id), "'"),
                    "its id", id.size(), kMaxIdBytes);
}

absl::Status CheckIdList(const Owner& owner, absl::string_view field,
                         const std::vector<std::string>& ids, size_t limit) {
  RETURN_IF_ERROR(CheckCount(owner, field, ids.size(), limit));
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i].size() > kMaxIdBytes) {
      return CheckBytes(owner, absl::StrCat(field, "[", i, "]"), ids[i].size(),
                        kMaxIdBytes);
    }
  }
  return absl::OkStatus();
}

template <typename O>
absl::Status CheckMap(const O& owner, absl::string_view field,
                      const std::map<std::string, std::string>& entries,
                      size_t max_entries, size_t max_value_bytes) {
  RETURN_IF_ERROR(CheckCount(owner, field, entries.size(), max_entries));
  for (const auto& [key, value] : entries) {
    if (key.size() > kMaxKeyBytes) {
      return CheckBytes(owner, absl::StrCat("a key of ", field), key.size(),
                        kMaxKeyBytes);
    }
    if (value.size() > max_value_bytes) {
      return CheckBytes(owner, absl::StrCat(field, " '", ShortId(key), "'"),
                        value.size(), max_value_bytes);
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string ShortId(const std::string& id) {
  if (id.size() <= kShownIdBytes) return id;
  return absl::StrCat(id.substr(0, kShownIdBytes), "...");
}

absl::Status CheckTensorLimits(const TensorSpec& spec, size_t index) {
  RETURN_IF_ERROR(CheckId("tensor", spec.id, index));
  const Owner owner{"tensor", spec.id};
  RETURN_IF_ERROR(CheckBytes(owner, "name", spec.name.size(), kMaxTextBytes));
  return CheckCount(owner, "shape dimensions", spec.shape.size(),
                    kMaxShapeRank);
}

absl::Status CheckOpLimits(const OpSpec& spec, size_t index) {
  RETURN_IF_ERROR(CheckId("op", spec.id, index));
  const Owner owner{"op", spec.id};
  for (const auto& [field, text] :
       {std::pair<absl::string_view, const std::string*>{"name", &spec.name},
        {"op_type", &spec.op_type},
        {"measured_on", &spec.measured_on}}) {
    RETURN_IF_ERROR(CheckBytes(owner, field, text->size(), kMaxTextBytes));
  }
  RETURN_IF_ERROR(
      CheckIdList(owner, "input_ids", spec.input_ids, kMaxOpInputs));
  RETURN_IF_ERROR(
      CheckIdList(owner, "output_ids", spec.output_ids, kMaxOpOutputs));
  return CheckMap(owner, "attributes", spec.attributes, kMaxAttributesPerOp,
                  kMaxTextBytes);
}

absl::Status CheckGraphLimits(
    const std::string& name, const std::map<std::string, std::string>& metadata,
    size_t tensors, size_t ops) {
  RETURN_IF_ERROR(CheckBytes("graph", "its name", name.size(), kMaxTextBytes));
  RETURN_IF_ERROR(CheckMap("graph", "metadata", metadata, kMaxMetadataEntries,
                           kMaxMetadataValueBytes));
  RETURN_IF_ERROR(CheckCount("graph", "tensors", tensors, kMaxGraphElements));
  return CheckCount("graph", "ops", ops, kMaxGraphElements);
}

}  // namespace echo::planner
