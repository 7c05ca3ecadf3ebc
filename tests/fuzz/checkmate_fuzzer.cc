// The Checkmate node-link JSON importer (planner/checkmate_import.h), both
// routes.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "fuzz_util.h"
#include "planner/checkmate_import.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  echo::fuzz::CheckImported(echo::planner::ImportCheckmateJson(text),
                            echo::planner::ImportCheckmateSpecs(text));
  return 0;
}
