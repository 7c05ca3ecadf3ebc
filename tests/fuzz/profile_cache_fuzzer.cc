// The profile cache file parser (server/profiler/profile_cache.h). The file
// carries a checksum that random bytes almost never match, so each input is
// parsed as it is and again with a correct checksum line appended, which
// lets the fuzzer reach the entry parser.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/str_format.h"
#include "fuzz_util.h"
#include "server/profiler/profile_cache.h"

namespace {

// FNV-1a 64, the file format's checksum (profile_cache.h documents it; the
// implementation is private to profile_cache.cc).
uint64_t Fnv1a64(const std::string& data) {
  uint64_t hash = 14695981039346656037ull;
  for (unsigned char c : data) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return hash;
}

// Parses, and checks that what Save would write parses back to the same.
void ParseAndRoundTrip(const std::string& contents) {
  echo::server::ProfileCache cache("", /*max_entries=*/64);
  if (!cache.Parse(contents).ok()) {
    ECHO_FUZZ_CHECK(cache.size() == 0);  // a failed parse changes nothing
    return;
  }
  const std::string saved = cache.Serialize();
  echo::server::ProfileCache reloaded("", /*max_entries=*/64);
  ECHO_FUZZ_CHECK(reloaded.Parse(saved).ok());
  ECHO_FUZZ_CHECK(reloaded.size() == cache.size());
  ECHO_FUZZ_CHECK(reloaded.Serialize() == saved);
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
