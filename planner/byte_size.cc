#include "planner/byte_size.h"

#include <cmath>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace echo::planner {
namespace {

struct Unit {
  const char* name;  // lower case
  double bytes;
};

constexpr Unit kUnits[] = {{"", 1},
                           {"b", 1},
                           {"kb", 1e3},
                           {"mb", 1e6},
                           {"gb", 1e9},
                           {"tb", 1e12},
                           {"kib", 1024.0},
                           {"mib", 1048576.0},
                           {"gib", 1073741824.0},
                           {"tib", 1099511627776.0},
                           {"k", 1024.0},
                           {"m", 1048576.0},
                           {"g", 1073741824.0},
                           {"t", 1099511627776.0}};

}  // namespace

absl::StatusOr<int64_t> ParseByteSize(absl::string_view text) {
  const auto invalid = [&]() {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", text, "' is not a byte size (e.g. 1048576, 1e10, 512MiB, 10GiB)"));
  };
  const std::string lower =
      absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  // The number ends where the unit's letters begin; 'e' followed by a digit
  // or sign is an exponent.
  size_t end = 0;
  while (end < lower.size()) {
    const char c = lower[end];
    const bool exponent = c == 'e' && end + 1 < lower.size() &&
                          (absl::ascii_isdigit(lower[end + 1]) ||
                           lower[end + 1] == '-' || lower[end + 1] == '+');
    if (!(absl::ascii_isdigit(c) || c == '.' || c == '+' || c == '-' ||
          exponent)) {
      break;
    }
    end += exponent ? 2 : 1;
  }
  double number = 0;
  if (end == 0 || !absl::SimpleAtod(lower.substr(0, end), &number)) {
    return invalid();
  }
  const std::string unit(absl::StripAsciiWhitespace(lower.substr(end)));
  for (const Unit& u : kUnits) {
    if (unit != u.name) continue;
    const double bytes = std::round(number * u.bytes);
    // 2^63 is the first double past int64's range.
    if (!(bytes >= 0) || !(bytes < 9223372036854775808.0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", text, "' is not a byte size from 0 to 2^63 - 1"));
    }
    return static_cast<int64_t>(bytes);
  }
  return invalid();
}

std::string HumanBytes(int64_t bytes) {
  static constexpr const char* kNames[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (std::abs(value) >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  return unit == 0 ? absl::StrCat(bytes, " B")
                   : absl::StrFormat("%.2f %s", value, kNames[unit]);
}

}  // namespace echo::planner
