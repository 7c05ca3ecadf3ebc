// What echod does to a graph it is sent, before and after the plan, timed on
// generated training graphs or on given .pb files. Prints a markdown table.
//
//   echo_convert_bench [--graphs=a.pb,...] [--repeats=5]
//
// Per graph, the best of --repeats: parsing the echo.v1.Graph from its wire
// bytes (the reference: protobuf's own work on the same bytes),
// GraphFromProto (validation into the planner's IR), destroying the IR, and
// simulating the plain schedule (policy NONE's work). Without --graphs, the
// speed benchmark's LSTM-attention and transformer graphs at ~1k, 10k and
// 100k ops.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "adapter/graph_convert.h"
#include "bench_flags.h"
#include "echo/v1/graph.pb.h"
#include "model_graphs.h"
#include "planner/memory_simulator.h"

namespace echo::bench {
namespace {

double BestMs(int repeats, const std::function<void()>& before,
              const std::function<void()>& timed) {
  double best = INFINITY;
  for (int r = 0; r < repeats; ++r) {
    before();
    const auto start = std::chrono::steady_clock::now();
    timed();
    best = std::min(best, std::chrono::duration<double, std::milli>(
                              std::chrono::steady_clock::now() - start)
                              .count());
  }
  return best;
}

int Row(const std::string& label, const std::string& bytes, int repeats) {
  // Into a fresh message each time, as echod parses each request.
  auto proto = std::make_unique<v1::Graph>();
  const double parse_ms = BestMs(
      repeats, [&] { proto = std::make_unique<v1::Graph>(); },
      [&] { proto->ParseFromString(bytes); });
  std::optional<planner::Graph> graph;
  std::string error;
  const double convert_ms = BestMs(
      repeats, [&] { graph.reset(); },
      [&] {
        absl::StatusOr<planner::Graph> converted =
            adapter::GraphFromProto(*proto);
        if (converted.ok()) {
          graph = *std::move(converted);
        } else {
          error = converted.status().ToString();
        }
      });
  if (!graph) {
    std::fprintf(stderr, "%s: %s\n", label.c_str(), error.c_str());
    return 1;
  }
  const double destroy_ms = BestMs(
      repeats,
      [&] {
        graph.reset();
        graph = *adapter::GraphFromProto(*proto);
      },
      [&] { graph.reset(); });
  graph = *adapter::GraphFromProto(*proto);
  int64_t peak_bytes = 0;
  const double simulate_ms = BestMs(
      repeats, [] {},
      [&] { peak_bytes = planner::SimulatePlain(*graph).peak_bytes; });
  if (peak_bytes <= 0) {
    std::fprintf(stderr, "%s: no plain peak\n", label.c_str());
    return 1;
  }
  std::printf("| %s | %d | %.1f | %.2f | %.2f | %.2f | %.2f | %.2fx |\n",
              label.c_str(), graph->num_ops(), bytes.size() / 1e6, parse_ms,
              convert_ms, destroy_ms, simulate_ms, convert_ms / parse_ms);
  return 0;
}

int Main(int argc, char** argv) {
  const std::map<std::string, std::string> flags = ParseFlags(argc, argv, 1);
  const int repeats = static_cast<int>(FlagDouble(flags, "repeats", 5));
  std::printf(
      "| graph | ops | MB | parse ms | GraphFromProto ms | destroy ms | NONE "
      "simulation ms | GraphFromProto / parse |\n"
      "|---|---|---|---|---|---|---|---|\n");
  int failed = 0;
  if (flags.count("graphs")) {
    for (absl::string_view path : absl::StrSplit(flags.at("graphs"), ',')) {
      std::ifstream in{std::string(path), std::ios::binary};
      std::stringstream bytes;
      bytes << in.rdbuf();
      if (!in) {
        std::fprintf(stderr, "cannot read %s\n", std::string(path).c_str());
        ++failed;
        continue;
      }
      failed += Row(std::string(path), bytes.str(), repeats);
    }
    return failed == 0 ? 0 : 1;
  }
  for (int scale : {8, 80, 800}) {
    ModelGraph model = MakeLstmAttentionGraph(4, scale, 64, 1024);
    failed +=
        Row("lstm_attention T=" + std::to_string(scale),
            adapter::GraphToProto(model.graph).SerializeAsString(), repeats);
  }
  for (int scale : {28, 280, 2800}) {
    ModelGraph model = MakeTransformerGraph(scale, 8, 512, 1024, 16);
    failed +=
        Row("transformer L=" + std::to_string(scale),
            adapter::GraphToProto(model.graph).SerializeAsString(), repeats);
  }
  return failed == 0 ? 0 : 1;
}

}  // namespace
}  // namespace echo::bench

int main(int argc, char** argv) { return echo::bench::Main(argc, argv); }
