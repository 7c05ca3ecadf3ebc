#include "bench_flags.h"

#include <cstdio>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "adapter/graph_convert.h"
#include "adapter/graph_file.h"
#include "planner/cost_model.h"

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

std::optional<planner::Graph> LoadGraphOrReport(const std::string& path) {
  const absl::StatusOr<v1::Graph> proto = adapter::LoadGraphFile(path);
  absl::StatusOr<planner::Graph> graph =
      proto.ok() ? adapter::GraphFromProto(*proto)
                 : absl::StatusOr<planner::Graph>(proto.status());
  if (!graph.ok()) {
    std::fprintf(stderr, "%s: %s\n", path.c_str(),
                 graph.status().ToString().c_str());
    return std::nullopt;
  }
  return *std::move(graph);
}

std::optional<std::vector<double>> PriceOrReport(
    const std::string& path, const planner::Graph& graph,
    const planner::DeviceSpec& device) {
  absl::StatusOr<planner::CostTable> table =
      planner::EstimateOpCosts(graph, &device, nullptr);
  if (!table.ok()) {
    std::fprintf(stderr, "%s: %s\n", path.c_str(),
                 table.status().ToString().c_str());
    return std::nullopt;
  }
  return table->Costs();
}

}  // namespace echo::bench
