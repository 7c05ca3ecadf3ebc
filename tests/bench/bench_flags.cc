#include "bench_flags.h"

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace echo::bench {

std::map<std::string, std::string> ParseFlags(int argc, char** argv,
                                              int first) {
  std::map<std::string, std::string> flags;
  for (int i = first; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (!absl::ConsumePrefix(&arg, "--")) continue;
    std::vector<std::string> kv = absl::StrSplit(arg, absl::MaxSplits('=', 1));
    flags[kv[0]] = kv.size() > 1 ? kv[1] : "true";
  }
  return flags;
}

double FlagDouble(const std::map<std::string, std::string>& flags,
                  const std::string& name, double fallback) {
  auto it = flags.find(name);
  double value = fallback;
  if (it != flags.end() && !absl::SimpleAtod(it->second, &value)) {
    value = fallback;
  }
  return value;
}

}  // namespace echo::bench
