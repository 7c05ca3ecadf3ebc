// Limits on what one graph may declare, checked by GraphBuilder::Build in
// time linear in the declarations' size. They bound the memory and time a
// request can cost (a 64 MiB request may otherwise hold one op with millions
// of inputs, or ids of megabytes echoed into every error) well above what
// real training graphs use. Errors are INVALID_ARGUMENT naming the op or
// tensor, the field, its size and the limit.
#ifndef ECHO_PLANNER_GRAPH_LIMITS_H_
#define ECHO_PLANNER_GRAPH_LIMITS_H_

#include <cstddef>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "planner/graph.h"

namespace echo::planner {

// Bytes of a tensor or op id, and of each id an op lists.
inline constexpr size_t kMaxIdBytes = 1024;
// Bytes of a name, op type, measured_on, attribute value or graph name.
inline constexpr size_t kMaxTextBytes = 4096;
// Bytes of an attribute or metadata key.
inline constexpr size_t kMaxKeyBytes = 256;
// Bytes of a metadata value.
inline constexpr size_t kMaxMetadataValueBytes = 65536;
inline constexpr size_t kMaxAttributesPerOp = 256;
inline constexpr size_t kMaxMetadataEntries = 256;
// Tensors one op reads (fan-in, repeats counted) and writes (fan-out).
inline constexpr size_t kMaxOpInputs = 65536;
inline constexpr size_t kMaxOpOutputs = 65536;
inline constexpr size_t kMaxShapeRank = 64;
// Tensors and ops of one graph (indices are int32).
inline constexpr size_t kMaxGraphElements = size_t{1} << 30;

// An id as errors quote it: at most 64 bytes, then "...".
std::string ShortId(const std::string& id);

// `index` is the declaration's position, for errors about its id.
absl::Status CheckTensorLimits(const TensorSpec& spec, size_t index);
absl::Status CheckOpLimits(const OpSpec& spec, size_t index);
absl::Status CheckGraphLimits(
    const std::string& name, const std::map<std::string, std::string>& metadata,
    size_t tensors, size_t ops);

}  // namespace echo::planner

#endif  // ECHO_PLANNER_GRAPH_LIMITS_H_
