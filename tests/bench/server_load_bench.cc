// Bounded load test: starts echod as a child process on a loopback port,
// runs N client threads for a set time, each cycling through a mix of calls
// (estimate, AUTO plan, fit check, node info, a malformed graph), and prints
// throughput, p50/p99 latency per call, answers by gRPC code, and echod's
// resident memory (VmRSS from /proc/<pid>/status) over time. With
// --probe_ms, one more thread polls Health and GetNodeInfo every that many
// ms (what a load balancer sees under the load); --graph_copies tiles the
// graph that many times into one request (e.g. DeepSpeech2 x 40: 35 MB).
// A benchmark, not a test: run it by hand.
//
//   echo_server_load_bench [--echod PATH] [--graph FILE] [--threads N]
//       [--seconds S] [--mix estimate,plan,fit,info,invalid]
//       [--max_concurrent_requests N] [--graph_copies N] [--probe_ms MS]
#include <sys/types.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "adapter/graph_file.h"
#include "client/planner_client.h"
#include "echod_child.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::string echod;
  std::string graph = "tests/data/checkmate/resnet50_b256_train.json";
  int threads = 8;
  double seconds = 60;
  std::vector<std::string> mix = {"estimate", "plan", "fit", "info", "invalid"};
  int max_concurrent_requests = 64;
  int graph_copies = 1;
  int probe_ms = 0;  // 0: no probe thread
};

bool Parse(int argc, char** argv, Args& args) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--echod") {
      args.echod = value;
    } else if (flag == "--graph") {
      args.graph = value;
    } else if (flag == "--threads") {
      if (!absl::SimpleAtoi(value, &args.threads)) return false;
    } else if (flag == "--seconds") {
      if (!absl::SimpleAtod(value, &args.seconds)) return false;
    } else if (flag == "--mix") {
      args.mix = absl::StrSplit(value, ',');
    } else if (flag == "--max_concurrent_requests") {
      if (!absl::SimpleAtoi(value, &args.max_concurrent_requests)) {
        return false;
      }
    } else if (flag == "--graph_copies") {
      if (!absl::SimpleAtoi(value, &args.graph_copies)) return false;
    } else if (flag == "--probe_ms") {
      if (!absl::SimpleAtoi(value, &args.probe_ms)) return false;
    } else {
      return false;
    }
  }
  for (const std::string& call : args.mix) {
    if (call != "estimate" && call != "plan" && call != "fit" &&
        call != "info" && call != "invalid") {
      return false;
    }
  }
  return argc % 2 == 1 && args.threads > 0 && args.seconds > 0 &&
         !args.mix.empty() && args.graph_copies > 0 && args.probe_ms >= 0;
}

// `graph` `copies` times over in one graph, each copy's ids prefixed with
// "c<i>/" so that the copies stay disjoint.
echo::v1::Graph Tiled(const echo::v1::Graph& graph, int copies) {
  if (copies == 1) return graph;
  echo::v1::Graph tiled = graph;
  tiled.clear_tensors();
  tiled.clear_ops();
  for (int c = 0; c < copies; ++c) {
    const std::string prefix = absl::StrCat("c", c, "/");
    const auto rename = [&](std::string* id) { id->insert(0, prefix); };
    for (echo::v1::Tensor tensor : graph.tensors()) {
      rename(tensor.mutable_id());
      *tiled.add_tensors() = std::move(tensor);
    }
    for (echo::v1::Op op : graph.ops()) {
      rename(op.mutable_id());
      for (std::string& id : *op.mutable_input_ids()) rename(&id);
      for (std::string& id : *op.mutable_output_ids()) rename(&id);
      *tiled.add_ops() = std::move(op);
    }
  }
  return tiled;
}

int64_t ResidentBytes(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) << 10;
  }
  return -1;
}

// Latencies and answers of one kind of call.
struct Tally {
  std::vector<double> seconds;
  std::map<std::string, int64_t> codes;
  void Add(const Tally& other) {
    seconds.insert(seconds.end(), other.seconds.begin(), other.seconds.end());
    for (const auto& [code, count] : other.codes) codes[code] += count;
  }
};

double Percentile(std::vector<double>& sorted, double p) {
  return sorted.empty() ? 0
                        : sorted[static_cast<size_t>(p * (sorted.size() - 1))];
}

std::string CodeName(absl::StatusCode code) {
  return code == absl::StatusCode::kOk ? "OK" : absl::StatusCodeToString(code);
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (!Parse(argc, argv, args)) {
    std::cerr << "usage: echo_server_load_bench [--echod PATH] [--graph FILE] "
                 "[--threads N] [--seconds S] [--mix "
                 "estimate,plan,fit,info,invalid] [--max_concurrent_requests "
                 "N] [--graph_copies N] [--probe_ms MS]\n";
    return 2;
  }
  absl::StatusOr<echo::v1::Graph> graph =
      echo::adapter::LoadGraphFile(args.graph);
  if (!graph.ok()) {
    std::cerr << graph.status() << "\n";
    return 1;
  }
  *graph = Tiled(*graph, args.graph_copies);
  absl::StatusOr<echo::bench::EchodChild> child =
      echo::bench::EchodChild::Start(
          args.echod, argv[0],
          {"--metrics_address=", "--log_level=error",
           "--profile_cache_dir=none",
           absl::StrCat("--max_concurrent_requests=",
                        args.max_concurrent_requests)},
          "echo_load_bench");
  if (!child.ok()) {
    std::cerr << child.status() << "\n";
    return 1;
  }
  const pid_t echod = child->pid();
  const echo::client::ClientOptions client_options = child->ClientOptions(60);

  echo::v1::EstimateMemoryRequest estimate;
  *estimate.mutable_graph() = *graph;
  echo::v1::GenerateRecomputePlanRequest plan;
  *plan.mutable_graph() = *graph;
  plan.set_policy(echo::v1::RECOMPUTE_POLICY_AUTO);
  echo::v1::CheckFitRequest fit;
  *fit.mutable_graph() = *graph;
  fit.mutable_device()->set_name("a100-40gb");
  echo::v1::EstimateMemoryRequest invalid = estimate;
  invalid.mutable_graph()->mutable_ops(0)->add_input_ids("no_such_tensor");

  const int64_t rss_start = ResidentBytes(echod);
  std::atomic<bool> done{false};
  std::atomic<int64_t> calls{0};
  std::vector<std::map<std::string, Tally>> tallies(args.threads);
  const Clock::time_point start = Clock::now();
  const Clock::time_point end =
      start + std::chrono::duration_cast<Clock::duration>(
                  std::chrono::duration<double>(args.seconds));
  std::vector<std::thread> threads;
  for (int t = 0; t < args.threads; ++t) {
    threads.emplace_back([&, t] {
      echo::client::PlannerClient client(client_options);
      for (size_t i = t; Clock::now() < end; ++i) {
        const std::string& call = args.mix[i % args.mix.size()];
        const Clock::time_point sent = Clock::now();
        absl::Status status;
        if (call == "estimate") {
          status = client.EstimateMemory(estimate).status();
        } else if (call == "plan") {
          status = client.GenerateRecomputePlan(plan).status();
        } else if (call == "fit") {
          status = client.CheckFit(fit).status();
        } else if (call == "info") {
          status = client.GetNodeInfo().status();
        } else {
          status = client.EstimateMemory(invalid).status();
        }
        Tally& tally = tallies[t][call];
        tally.seconds.push_back(
            std::chrono::duration<double>(Clock::now() - sent).count());
        ++tally.codes[CodeName(status.code())];
        ++calls;
      }
    });
  }
  // echod's RSS every second; a line every 10 s.
  std::vector<std::pair<double, int64_t>> rss_series;
  std::thread sampler([&] {
    for (int second = 1; !done; ++second) {
      std::this_thread::sleep_until(start + std::chrono::seconds(second));
      if (done) break;
      rss_series.push_back({static_cast<double>(second), ResidentBytes(echod)});
      if (second % 10 == 0) {
        std::cout << absl::StrFormat(
                         "  t=%3d s  calls %8d  echod RSS %.1f MiB\n", second,
                         calls.load(), rss_series.back().second / 1048576.0)
                  << std::flush;
      }
    }
  });
  // Health and GetNodeInfo on a connection of their own, every probe_ms.
  std::map<std::string, Tally> probes;
  std::thread prober([&] {
    if (args.probe_ms == 0) return;
    echo::client::PlannerClient client(client_options);
    while (Clock::now() < end) {
      for (const char* call : {"probe health", "probe info"}) {
        const Clock::time_point sent = Clock::now();
        const absl::Status status = call == std::string("probe health")
                                        ? client.Health("").status()
                                        : client.GetNodeInfo().status();
        probes[call].seconds.push_back(
            std::chrono::duration<double>(Clock::now() - sent).count());
        ++probes[call].codes[CodeName(status.code())];
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(args.probe_ms));
    }
  });
  for (std::thread& thread : threads) thread.join();
  prober.join();
  done = true;
  sampler.join();
  const double elapsed =
      std::chrono::duration<double>(Clock::now() - start).count();
  const int64_t rss_end = ResidentBytes(echod);
  int64_t rss_peak = std::max(rss_start, rss_end);
  for (const auto& [second, bytes] : rss_series) {
    rss_peak = std::max(rss_peak, bytes);
  }
  const int wait_status = child->Stop();

  std::map<std::string, Tally> merged = std::move(probes);
  for (auto& per_thread : tallies) {
    for (auto& [call, tally] : per_thread) merged[call].Add(tally);
  }
  std::cout << absl::StrFormat(
      "%d threads, %.0f s, %s (%d ops, %.1f MB a request): %d calls, %.1f "
      "calls/s\n",
      args.threads, elapsed, args.graph, graph->ops_size(),
      estimate.ByteSizeLong() / 1e6, calls.load(), calls.load() / elapsed);
  std::cout << "| call | calls | p50 ms | p99 ms | max ms | answers |\n"
               "|---|---|---|---|---|---|\n";
  for (auto& [call, tally] : merged) {
    std::sort(tally.seconds.begin(), tally.seconds.end());
    std::string codes;
    for (const auto& [code, count] : tally.codes) {
      absl::StrAppend(&codes, codes.empty() ? "" : ", ", code, " ", count);
    }
    std::cout << absl::StrFormat("| %s | %d | %.2f | %.2f | %.2f | %s |\n",
                                 call, tally.seconds.size(),
                                 Percentile(tally.seconds, 0.5) * 1e3,
                                 Percentile(tally.seconds, 0.99) * 1e3,
                                 Percentile(tally.seconds, 1.0) * 1e3, codes);
  }
  std::cout << absl::StrFormat(
      "echod RSS: %.1f MiB at start, %.1f MiB peak, %.1f MiB at end; exit "
      "%s\n",
      rss_start / 1048576.0, rss_peak / 1048576.0, rss_end / 1048576.0,
      WIFEXITED(wait_status) ? absl::StrCat("status ", WEXITSTATUS(wait_status))
                             : "by signal");
  return WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0 ? 0 : 1;
}
