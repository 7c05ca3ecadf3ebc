// What the benchmarks share: --name=value flags (not tests; no CLI11
// needed), loading a graph file and pricing it on a catalog device.
#ifndef ECHO_TESTS_BENCH_BENCH_FLAGS_H_
#define ECHO_TESTS_BENCH_BENCH_FLAGS_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "planner/device_catalog.h"
#include "planner/graph.h"

namespace echo::bench {

// The --name=value (or --name, read as "true") arguments from argv[first] on.
std::map<std::string, std::string> ParseFlags(int argc, char** argv, int first);

// The flag as a number; `fallback` when it is absent or not a number.
double FlagDouble(const std::map<std::string, std::string>& flags,
                  const std::string& name, double fallback);

// The echo.v1.Graph file at `path` as a planner graph, or the error printed
// to stderr after `path` and nullopt.
std::optional<planner::Graph> LoadGraphOrReport(const std::string& path);

// The op costs of `graph` on `device` (the cost model, no profile), or the
// error printed to stderr after `path` and nullopt.
std::optional<std::vector<double>> PriceOrReport(
    const std::string& path, const planner::Graph& graph,
    const planner::DeviceSpec& device);

}  // namespace echo::bench

#endif  // ECHO_TESTS_BENCH_BENCH_FLAGS_H_
