// The planner's text graph format (planner/text_format.h), both routes.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "fuzz_util.h"
#include "planner/text_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  echo::fuzz::CheckImported(echo::planner::ParseTextGraph(text),
                            echo::planner::ParseTextGraphSpecs(text));
  return 0;
}
