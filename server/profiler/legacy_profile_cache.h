// The profile cache's text format of echod before its SQLite database
// (profile_cache.h), read once to import an old `profile_cache.v1`:
//
//   echo-profile-cache 2
//   entries <n>
//   <seconds>\t<C-escaped key>\t<16 hex digits>   (n lines, least recently
//                                  used first; FNV-1a 64 of the line before
//                                  its last tab)
//   checksum <16 hex digits>          (FNV-1a 64 of everything above)
//
// A file whose checksum fails keeps the entries whose own checksums hold
// (one bad byte costs one entry, not the cache); version 1 files (no entry
// checksums) load whole or not at all.
#ifndef ECHO_SERVER_PROFILER_LEGACY_PROFILE_CACHE_H_
#define ECHO_SERVER_PROFILER_LEGACY_PROFILE_CACHE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace echo::server {

// Key and seconds, least recently used first.
using LegacyEntries = std::vector<std::pair<std::string, double>>;

// What a damaged file lost: why its checksum failed, and the entries
// dropped.
struct LegacyDamage {
  std::string why;
  int64_t dropped_entries = 0;
};

// A damaged version 2 file yields the entries whose own checksums hold and
// says in `damage` what was lost; one with none is a DATA_LOSS error.
absl::StatusOr<LegacyEntries> ParseLegacyProfileCache(
    absl::string_view contents, LegacyDamage* damage = nullptr);

// The version 2 file of `entries` (tests and the fuzzer make old files).
std::string SerializeLegacyProfileCache(const LegacyEntries& entries);

// An old key is the device key (GPU name | compute capability | driver |
// cudart | cuBLAS | cuDNN versions) and the op signature, joined by '|':
// split after the cuDNN field. False when the key has no such field.
bool SplitLegacyKey(absl::string_view key, std::string* device,
                    std::string* op);

}  // namespace echo::server

#endif  // ECHO_SERVER_PROFILER_LEGACY_PROFILE_CACHE_H_
