// Latency of the scheduler RPCs as a scheduler sees them: echod in its own
// process (echod_child.h), loopback gRPC, client-side wall time. For each
// graph, RegisterGraph once (cold) and again (already registered), then by
// fingerprint only, each question asked once cold and then --repeat times
// from the answer cache: CheckFit on every catalog device with each one's
// largest batch, FindMaxBatchSize and GetMemoryFrontier on a100-80gb, and
// an AUTO plan within 5%. Graphs: the five Checkmate graphs (batch from
// their names), the hook's five fixtures and a ~10k-op generated
// Transformer. Prints a markdown table; a benchmark, not a test.
//
//   echo_scheduler_rpc_bench [--echod PATH] [--repeat N] [--only SUBSTRING]
//
// --only keeps the graphs whose name contains SUBSTRING.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "adapter/graph_file.h"
#include "echod_child.h"
#include "model_graphs.h"
#include "planner/checkmate_import.h"

namespace echo::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct NamedGraph {
  std::string name;
  v1::Graph graph;
};

std::vector<NamedGraph> Graphs() {
  std::vector<NamedGraph> graphs;
  const std::string data = ECHO_TEST_DATA_DIR;
  for (const char* file :
       {"vgg16_b256_train.json", "vgg19_b256_train.json",
        "resnet50_b256_train.json", "mobilenet_b512_train.json",
        "fcn8_vgg_b32_train.json"}) {
    absl::StatusOr<v1::Graph> graph = adapter::LoadGraphFile(
        absl::StrCat(data, "/checkmate/", file), adapter::GraphFormat::kAuto,
        planner::kCheckmateBatchFromName);
    if (graph.ok()) graphs.push_back({file, *std::move(graph)});
  }
  for (const char* file : {"resnet50.pb", "transformer.pb", "gpt.pb", "nmt.pb",
                           "deepspeech2.pb"}) {
    absl::StatusOr<v1::Graph> graph =
        adapter::LoadGraphFile(absl::StrCat(data, "/graphs/", file));
    if (graph.ok()) graphs.push_back({file, *std::move(graph)});
  }
  // ~10k ops: 8 sequences of 1024 tokens, hidden 1024, 16 heads.
  graphs.push_back(
      {"transformer (generated)",
       BatchMarkedProto(MakeTransformerGraph(250, 8, 1024, 1024, 16).graph,
                        8)});
  return graphs;
}

// One question: its cold latency, then `repeat` cached ones; an error
// string when a call fails or a cached answer differs from the cold one.
struct Latency {
  double cold_ms = 0;
  std::vector<double> cached_ms;
  std::string error;
  std::string answer;  // what the cold call answered, briefly
};

std::string Brief(const v1::RegisterGraphResponse& r) {
  return absl::StrCat(r.op_count(), " ops");
}
std::string Brief(const v1::CheckFitResponse& r) { return r.message(); }
std::string Brief(const v1::FindMaxBatchSizeResponse& r) {
  return absl::StrCat("batch ", r.without_recompute().batch_size(), " / ",
                      r.with_recompute().batch_size(), " (",
                      r.plans_evaluated(), " plans)");
}
std::string Brief(const v1::GetMemoryFrontierResponse& r) {
  return absl::StrCat(r.points_size(), " points (", r.plans_evaluated(),
                      " plans)");
}
std::string Brief(const v1::GenerateRecomputePlanResponse& r) {
  return absl::StrFormat("%.2f%% extra compute",
                         100 * r.recompute_overhead_ratio());
}

template <typename Response>
Latency Measure(int repeat,
                const std::function<absl::StatusOr<Response>()>& call) {
  Latency latency;
  auto timed = [&](double& ms) {
    const Clock::time_point start = Clock::now();
    absl::StatusOr<Response> response = call();
    ms =
        std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    return response;
  };
  const absl::StatusOr<Response> cold = timed(latency.cold_ms);
  if (!cold.ok()) {
    latency.error = cold.status().ToString();
    return latency;
  }
  latency.answer = Brief(*cold);
  for (int i = 0; i < repeat; ++i) {
    double ms = 0;
    const absl::StatusOr<Response> again = timed(ms);
    latency.cached_ms.push_back(ms);
    if (!again.ok()) {
      latency.error = again.status().ToString();
    } else if (again->SerializeAsString() != cold->SerializeAsString()) {
      latency.error = "the repeated answer differs from the first";
    }
  }
  return latency;
}

void PrintRow(const std::string& graph, int ops, const std::string& rpc,
              Latency latency) {
  if (!latency.error.empty()) {
    std::cout << absl::StrFormat("| %s | %d | %s | error: %s |\n", graph, ops,
                                 rpc, latency.error);
    return;
  }
  std::sort(latency.cached_ms.begin(), latency.cached_ms.end());
  const std::vector<double>& cached = latency.cached_ms;
  std::cout << absl::StrFormat(
      "| %s | %d | %s | %.2f | %.3f | %.3f | %s |\n", graph, ops, rpc,
      latency.cold_ms, cached.empty() ? 0.0 : cached[cached.size() / 2],
      cached.empty() ? 0.0 : cached.back(), latency.answer);
}

int Run(const std::string& echod, const std::string& argv0, int repeat,
        const std::string& only) {
  absl::StatusOr<EchodChild> child = EchodChild::Start(
      echod, argv0,
      {"--metrics_address=", "--log_level=error", "--profile_cache_dir=none"},
      "echo_scheduler_rpc_bench");
  if (!child.ok()) {
    std::cerr << child.status() << "\n";
    return 1;
  }
  client::PlannerClient client(child->ClientOptions(120));
  std::cout << "| graph | ops | RPC | cold ms | cached p50 ms | cached max ms "
               "| answer |\n|---|---|---|---|---|---|---|\n";
  for (const NamedGraph& named : Graphs()) {
    if (named.name.find(only) == std::string::npos) continue;
    const int ops = named.graph.ops_size();
    v1::RegisterGraphRequest register_request;
    *register_request.mutable_graph() = named.graph;
    std::string fingerprint;
    Latency registered = Measure<v1::RegisterGraphResponse>(repeat, [&] {
      absl::StatusOr<v1::RegisterGraphResponse> response =
          client.RegisterGraph(register_request);
      if (response.ok()) {
        fingerprint = response->graph_fingerprint();
        // The first registers, the repeats find it: the one field that
        // differs.
        response->clear_newly_registered();
      }
      return response;
    });
    PrintRow(named.name, ops, "RegisterGraph (then again)", registered);
    if (fingerprint.empty()) continue;

    v1::CheckFitRequest fit;
    fit.set_graph_fingerprint(fingerprint);
    fit.add_device_names("all");
    fit.set_include_max_batch(true);
    PrintRow(named.name, ops, "CheckFit all + max batch",
             Measure<v1::CheckFitResponse>(
                 repeat, [&] { return client.CheckFit(fit); }));
    v1::FindMaxBatchSizeRequest batch;
    batch.set_graph_fingerprint(fingerprint);
    batch.mutable_device()->set_name("a100-80gb");
    PrintRow(named.name, ops, "FindMaxBatchSize",
             Measure<v1::FindMaxBatchSizeResponse>(
                 repeat, [&] { return client.FindMaxBatchSize(batch); }));
    v1::GetMemoryFrontierRequest frontier;
    frontier.set_graph_fingerprint(fingerprint);
    frontier.mutable_device()->set_name("a100-80gb");
    PrintRow(named.name, ops, "GetMemoryFrontier",
             Measure<v1::GetMemoryFrontierResponse>(
                 repeat, [&] { return client.GetMemoryFrontier(frontier); }));
    v1::GenerateRecomputePlanRequest plan;
    plan.set_graph_fingerprint(fingerprint);
    plan.set_policy(v1::RECOMPUTE_POLICY_AUTO);
    plan.mutable_device()->set_name("a100-80gb");
    plan.set_max_overhead_ratio(0.05);
    PrintRow(named.name, ops, "GenerateRecomputePlan AUTO 5%",
             Measure<v1::GenerateRecomputePlanResponse>(
                 repeat, [&] { return client.GenerateRecomputePlan(plan); }));
  }
  return 0;
}

}  // namespace
}  // namespace echo::bench

int main(int argc, char** argv) {
  std::string echod, only;
  int repeat = 20;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--echod" && i + 1 < argc) {
      echod = argv[++i];
    } else if (arg == "--only" && i + 1 < argc) {
      only = argv[++i];
    } else if (arg == "--repeat" && i + 1 < argc) {
      repeat = std::atoi(argv[++i]);
    } else {
      repeat = 0;
    }
    if (repeat < 1) {
      std::cerr << "usage: " << argv[0]
                << " [--echod PATH] [--repeat N] [--only SUBSTRING]\n";
      return 2;
    }
  }
  return echo::bench::Run(echod, argv[0], repeat, only);
}
