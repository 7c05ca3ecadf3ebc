// Service throughput: echod in-process on loopback, N client threads sending
// the same request for a fixed time. Prints requests/s, latency percentiles
// and the server's resident memory before and after (bounded memory).
//
//   echo_server_load_bench [--graph FILE] [--threads N] [--seconds S]
//                          [--method plan|estimate] [--policy P]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "adapter/graph_file.h"
#include "client/planner_client.h"
#include "server/echo_server.h"
#include "spdlog/spdlog.h"

namespace {

int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * 4096;
}

struct Args {
  std::string graph = "tests/data/checkmate/resnet50_b256_train.json";
  int threads = 4;
  double seconds = 5;
  std::string method = "plan";
  std::string policy = "auto";
};

bool Parse(int argc, char** argv, Args& args) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--graph") {
      args.graph = value;
    } else if (flag == "--threads") {
      if (!absl::SimpleAtoi(value, &args.threads)) return false;
    } else if (flag == "--seconds") {
      if (!absl::SimpleAtod(value, &args.seconds)) return false;
    } else if (flag == "--method") {
      args.method = value;
    } else if (flag == "--policy") {
      args.policy = value;
    } else {
      return false;
    }
  }
  return args.threads > 0 && args.seconds > 0 &&
         (args.method == "plan" || args.method == "estimate");
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (!Parse(argc, argv, args)) {
    std::cerr << "usage: echo_server_load_bench [--graph FILE] [--threads N] "
                 "[--seconds S] [--method plan|estimate] [--policy P]\n";
    return 2;
  }
  spdlog::set_level(spdlog::level::warn);
  absl::StatusOr<echo::v1::Graph> graph =
      echo::adapter::LoadGraphFile(args.graph);
  if (!graph.ok()) {
    std::cerr << graph.status() << "\n";
    return 1;
  }
  echo::server::ServerOptions options;
  options.grpc_address = "127.0.0.1:0";
  options.metrics_address = "";
  options.max_concurrent_requests = 1024;
  absl::StatusOr<std::unique_ptr<echo::server::EchoServer>> server =
      echo::server::EchoServer::Start(options);
  if (!server.ok()) {
    std::cerr << server.status() << "\n";
    return 1;
  }
  echo::client::ClientOptions client_options;
  client_options.server = absl::StrCat("127.0.0.1:", (*server)->grpc_port());

  echo::v1::GenerateRecomputePlanRequest plan_request;
  *plan_request.mutable_graph() = *graph;
  echo::v1::RecomputePolicy policy;
  std::string upper = args.policy;
  for (char& c : upper) c = static_cast<char>(toupper(c));
  if (!echo::v1::RecomputePolicy_Parse("RECOMPUTE_POLICY_" + upper, &policy)) {
    std::cerr << "unknown policy " << args.policy << "\n";
    return 2;
  }
  plan_request.set_policy(policy);
  echo::v1::EstimateMemoryRequest estimate_request;
  *estimate_request.mutable_graph() = *graph;

  const int64_t rss_before = ResidentBytes();
  std::atomic<int64_t> errors{0};
  std::vector<std::vector<double>> latencies(args.threads);
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration<double>(args.seconds);
  std::vector<std::thread> threads;
  for (int t = 0; t < args.threads; ++t) {
    threads.emplace_back([&, t] {
      echo::client::PlannerClient client(client_options);
      while (std::chrono::steady_clock::now() < deadline) {
        const auto start = std::chrono::steady_clock::now();
        const bool ok = args.method == "plan"
                            ? client.GenerateRecomputePlan(plan_request).ok()
                            : client.EstimateMemory(estimate_request).ok();
        if (!ok) ++errors;
        latencies[t].push_back(std::chrono::duration<double>(
                                   std::chrono::steady_clock::now() - start)
                                   .count());
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  std::vector<double> all;
  for (const auto& per_thread : latencies) {
    all.insert(all.end(), per_thread.begin(), per_thread.end());
  }
  std::sort(all.begin(), all.end());
  const auto percentile = [&](double p) {
    return all.empty() ? 0.0 : all[static_cast<size_t>(p * (all.size() - 1))];
  };
  std::cout << absl::StrFormat(
      "| %s %s | %d ops | %d threads | %.0f req/s | p50 %.2f ms | p99 %.2f ms "
      "| errors %d | server+client RSS %.1f -> %.1f MiB |\n",
      args.method, args.method == "plan" ? args.policy : "", graph->ops_size(),
      args.threads, all.size() / args.seconds, percentile(0.5) * 1e3,
      percentile(0.99) * 1e3, errors.load(), rss_before / 1048576.0,
      ResidentBytes() / 1048576.0);
  return errors.load() == 0 ? 0 : 1;
}
