// The old profile cache file's parser, which imports it once
// (server/profiler/legacy_profile_cache.h). The file
// carries a checksum that random bytes almost never match, so each input is
// parsed as it is and again with a correct checksum line appended, which
// lets the fuzzer reach the entry parser.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/str_format.h"
#include "fuzz_util.h"
#include "server/profiler/legacy_profile_cache.h"

namespace {

// FNV-1a 64, the file format's checksum (legacy_profile_cache.h documents
// it; the implementation is private to legacy_profile_cache.cc).
uint64_t Fnv1a64(const std::string& data) {
  uint64_t hash = 14695981039346656037ull;
  for (unsigned char c : data) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return hash;
}

// Parses, and checks that what the file of the parsed entries parses back
// to the same.
void ParseAndRoundTrip(const std::string& contents) {
  using echo::server::ParseLegacyProfileCache;
  absl::StatusOr<echo::server::LegacyEntries> entries =
      ParseLegacyProfileCache(contents);
  if (!entries.ok()) return;
  const std::string saved = echo::server::SerializeLegacyProfileCache(*entries);
  absl::StatusOr<echo::server::LegacyEntries> reloaded =
      ParseLegacyProfileCache(saved);
  ECHO_FUZZ_CHECK(reloaded.ok());
  ECHO_FUZZ_CHECK(*reloaded == *entries);
  ECHO_FUZZ_CHECK(echo::server::SerializeLegacyProfileCache(*reloaded) ==
                  saved);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string contents(reinterpret_cast<const char*>(data), size);
  ParseAndRoundTrip(contents);
  if (!contents.empty() && contents.back() != '\n') contents += '\n';
  absl::StrAppendFormat(&contents, "checksum %016x\n", Fnv1a64(contents));
  ParseAndRoundTrip(contents);
  return 0;
}
