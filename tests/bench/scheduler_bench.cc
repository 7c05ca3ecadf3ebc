// Latency of the scheduler searches, in process: FindMaxBatchSize and
// ComputeMemoryFrontier on the five Checkmate graphs (batch from their file
// names, relative costs) and on a ~10k-op generated Transformer (every
// activation and input scaled with the batch, measured costs). Prints a
// markdown table; not a test.
//
//   echo_scheduler_bench [--only=transformer|checkmate] [--repeat=N]
//
// --repeat runs each search N times (default 1) and prints the range.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "model_graphs.h"
#include "planner/checkmate_import.h"
#include "planner/schedule/batch_search.h"

namespace echo::bench {
namespace {

using planner::Graph;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Measured seconds when the graph has them, else relative costs.
std::vector<double> Costs(const Graph& graph) {
  std::vector<double> costs;
  for (const planner::Op& op : graph.ops()) {
    costs.push_back(op.measured_time_seconds >= 0 ? op.measured_time_seconds
                                                  : op.relative_cost);
  }
  return costs;
}

double Millis(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now() - start)
      .count();
}

// "12.3" for one run, "12.3–15.0" for a range.
std::string Range(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  if (ms.front() == ms.back()) return absl::StrFormat("%.1f", ms.front());
  return absl::StrFormat("%.1f–%.1f", ms.front(), ms.back());
}

void Run(const std::string& name, const Graph& graph, int64_t memory,
         int repeat) {
  planner::MaxBatchOptions options;
  options.device_memory_bytes = memory;
  options.max_overhead_ratio = 0.05;
  const planner::OpCostFn costs =
      [](const Graph& g) -> absl::StatusOr<std::vector<double>> {
    return Costs(g);
  };
  std::vector<double> batch_ms, frontier_ms;
  absl::StatusOr<planner::MaxBatchResult> batch;
  absl::StatusOr<planner::MemoryFrontier> frontier;
  for (int i = 0; i < repeat; ++i) {
    auto start = std::chrono::steady_clock::now();
    batch = planner::FindMaxBatchSize(graph, costs, options);
    batch_ms.push_back(Millis(start));
  }
  for (int i = 0; i < repeat; ++i) {
    auto start = std::chrono::steady_clock::now();
    frontier = planner::ComputeMemoryFrontier(graph, Costs(graph), {});
    frontier_ms.push_back(Millis(start));
  }
  if (!batch.ok() || !frontier.ok()) {
    std::printf("| %s | error: %s %s |\n", name.c_str(),
                batch.status().ToString().c_str(),
                frontier.status().ToString().c_str());
    return;
  }
  std::printf("| %s | %d | %d | %d | %d | %d | %s | %zu%s | %d | %s |\n",
              name.c_str(), graph.num_ops(),
              static_cast<int>(graph.batch_size()),
              static_cast<int>(batch->without_recompute.batch),
              static_cast<int>(batch->with_recompute.batch),
              batch->plans_evaluated, Range(batch_ms).c_str(),
              frontier->points.size(), frontier->truncated ? " (budget)" : "",
              frontier->plans_evaluated, Range(frontier_ms).c_str());
}

}  // namespace
}  // namespace echo::bench

int main(int argc, char** argv) {
  using namespace echo;
  constexpr int64_t kGiB = int64_t{1} << 30;
  std::string only;
  int repeat = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--only=", 0) == 0) {
      only = arg.substr(7);
    } else if (arg.rfind("--repeat=", 0) == 0) {
      repeat = std::atoi(arg.c_str() + 9);
    }
    if ((!only.empty() && only != "transformer" && only != "checkmate") ||
        repeat < 1) {
      std::fprintf(stderr,
                   "usage: %s [--only=transformer|checkmate] [--repeat=N]\n",
                   argv[0]);
      return 2;
    }
  }
  std::printf(
      "| graph | ops | graph batch | max batch plain | max batch AUTO<=5%% | "
      "plans | FindMaxBatchSize ms | frontier points | plans | "
      "frontier ms |\n|---|---|---|---|---|---|---|---|---|---|\n");
  for (const char* file :
       only == "transformer"
           ? std::vector<const char*>{}
           : std::vector<const char*>{
                 "vgg16_b256_train.json", "vgg19_b256_train.json",
                 "resnet50_b256_train.json", "mobilenet_b512_train.json",
                 "fcn8_vgg_b32_train.json"}) {
    planner::CheckmateImportOptions options;
    options.batch_size = planner::CheckmateBatchFromName(file);
    absl::StatusOr<planner::Graph> graph = planner::ImportCheckmateJson(
        bench::ReadFile(std::string(ECHO_TEST_DATA_DIR) + "/checkmate/" + file),
        options);
    if (!graph.ok()) {
      std::printf("| %s | %s |\n", file, graph.status().ToString().c_str());
      continue;
    }
    bench::Run(file, *graph, 16 * kGiB, repeat);
  }
  if (only == "checkmate") return 0;
  // ~10k ops: 8 sequences of 1024 tokens, hidden 1024, 16 heads.
  bench::ModelGraph transformer =
      bench::MakeTransformerGraph(250, 8, 1024, 1024, 16);
  bench::Run("transformer (generated)",
             bench::WithBatchMarks(transformer.graph, 8), 80 * kGiB, repeat);
  return 0;
}
