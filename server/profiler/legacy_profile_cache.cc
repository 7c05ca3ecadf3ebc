#include "server/profiler/legacy_profile_cache.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace echo::server {
namespace {

constexpr absl::string_view kHeader = "echo-profile-cache 2";
constexpr absl::string_view kHeaderV1 = "echo-profile-cache 1";
constexpr absl::string_view kChecksumPrefix = "checksum ";

uint64_t Fnv1a64(absl::string_view data) {
  uint64_t hash = 14695981039346656037ull;
  for (unsigned char c : data) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return hash;
}

// One entry line: "<seconds>\t<C-escaped key>", then in version 2 a tab and
// the FNV-1a 64 of what precedes it. False when the line does not hold.
bool ParseEntry(absl::string_view line, bool with_checksum, std::string* key,
                double* seconds) {
  if (with_checksum) {
    const size_t tab = line.rfind('\t');
    uint64_t checksum = 0;
    if (tab == absl::string_view::npos ||
        !absl::SimpleHexAtoi(line.substr(tab + 1), &checksum) ||
        checksum != Fnv1a64(line.substr(0, tab))) {
      return false;
    }
    line = line.substr(0, tab);
  }
  std::pair<absl::string_view, absl::string_view> fields =
      absl::StrSplit(line, absl::MaxSplits('\t', 1));
  return absl::SimpleAtod(fields.first, seconds) && std::isfinite(*seconds) &&
         *seconds >= 0 && absl::CUnescape(fields.second, key);
}

// Why the whole file's checksum fails, or empty when it holds.
std::string FileDamage(absl::string_view contents) {
  if (!absl::EndsWith(contents, "\n")) return "no final newline (truncated)";
  const absl::string_view lines_text = contents.substr(0, contents.size() - 1);
  const size_t body_end = lines_text.rfind('\n');
  const size_t checksum_start =
      body_end == absl::string_view::npos ? 0 : body_end + 1;
  absl::string_view checksum_line = lines_text.substr(checksum_start);
  uint64_t checksum = 0;
  if (!absl::ConsumePrefix(&checksum_line, kChecksumPrefix) ||
      !absl::SimpleHexAtoi(checksum_line, &checksum)) {
    return "no checksum line (truncated)";
  }
  if (checksum != Fnv1a64(contents.substr(0, checksum_start))) {
    return "checksum mismatch";
  }
  return "";
}

}  // namespace

absl::StatusOr<LegacyEntries> ParseLegacyProfileCache(
    absl::string_view contents, LegacyDamage* damage_out) {
  auto corrupt = [](absl::string_view why) { return absl::DataLossError(why); };
  std::vector<absl::string_view> lines =
      absl::StrSplit(contents, '\n', absl::SkipEmpty());
  const bool v2 = !lines.empty() && lines[0] == kHeader;
  if (!v2 && (lines.empty() || lines[0] != kHeaderV1)) {
    return corrupt(absl::StrCat("unknown header, expected '", kHeader, "'"));
  }
  const std::string damage = FileDamage(contents);
  if (!damage.empty() && !v2) return corrupt(damage);
  // Entry lines: after the header and the count, before the checksum.
  size_t end = lines.size();
  if (end > 0 && absl::StartsWith(lines[end - 1], kChecksumPrefix)) --end;
  int64_t count = -1;
  absl::string_view count_line = lines.size() > 1 ? lines[1] : "";
  const bool counted = absl::ConsumePrefix(&count_line, "entries ") &&
                       absl::SimpleAtoi(count_line, &count);
  if (damage.empty() && (!counted || count != static_cast<int64_t>(end) - 2)) {
    return corrupt("entry count does not match the entries");
  }
  LegacyEntries entries;
  int64_t bad = 0;
  for (size_t i = 2; i < end; ++i) {
    std::string key;
    double seconds = 0;
    if (ParseEntry(lines[i], v2, &key, &seconds)) {
      entries.emplace_back(std::move(key), seconds);
    } else if (damage.empty()) {
      return corrupt(absl::StrCat("bad entry on line ", i + 1));
    } else {
      ++bad;
    }
  }
  if (!damage.empty()) {
    // Entries the file said it had and that are gone count as dropped too.
    bad = std::max<int64_t>(
        bad, counted ? count - static_cast<int64_t>(entries.size()) : 0);
    if (entries.empty()) return corrupt(damage);
  }
  if (damage_out != nullptr) *damage_out = {damage, bad};
  return entries;
}

std::string SerializeLegacyProfileCache(const LegacyEntries& entries) {
  std::string body = absl::StrCat(kHeader, "\nentries ", entries.size(), "\n");
  for (const auto& [key, seconds] : entries) {
    const std::string entry =
        absl::StrFormat("%.17g\t%s", seconds, absl::CEscape(key));
    absl::StrAppendFormat(&body, "%s\t%016x\n", entry, Fnv1a64(entry));
  }
  absl::StrAppendFormat(&body, "%s%016x\n", kChecksumPrefix, Fnv1a64(body));
  return body;
}

bool SplitLegacyKey(absl::string_view key, std::string* device,
                    std::string* op) {
  const size_t cudnn = key.find("|cudnn ");
  if (cudnn == absl::string_view::npos) return false;
  const size_t end = key.find('|', cudnn + 1);
  if (end == absl::string_view::npos) return false;
  *device = std::string(key.substr(0, end));
  *op = std::string(key.substr(end + 1));
  return !op->empty();
}

}  // namespace echo::server
