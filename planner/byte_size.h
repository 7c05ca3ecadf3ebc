// Byte counts as people write and read them: "10GiB", "512 MiB", "1e10",
// "1.5 GB" in; "1.23 GiB", "512 B" out.
#ifndef ECHO_PLANNER_BYTE_SIZE_H_
#define ECHO_PLANNER_BYTE_SIZE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace echo::planner {

// A non-negative number (integer, decimal or with an exponent) and an
// optional unit, case-insensitive, space allowed between: B; KB, MB, GB, TB
// (powers of 1000); KiB, MiB, GiB, TiB (powers of 1024); K, M, G, T read as
// the binary units. The result is rounded to a whole byte. INVALID_ARGUMENT
// for anything else, negatives, or more than int64 holds.
absl::StatusOr<int64_t> ParseByteSize(absl::string_view text);

// "1.23 GiB", "512 B" (binary units, two decimals).
std::string HumanBytes(int64_t bytes);

}  // namespace echo::planner

#endif  // ECHO_PLANNER_BYTE_SIZE_H_
