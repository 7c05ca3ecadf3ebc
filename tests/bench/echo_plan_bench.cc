// Recompute planner benchmarks. Prints markdown tables to stdout.
//
//   echo_plan_bench quality [--milp_seconds=60] [--milp_max_ops=100]
//                           [--milp_max_nonzeros=250000]
//                           [--graphs=vgg16_b256_train,...]
//                           [--fractions=0.8,0.7]
//     On the Checkmate graphs, for memory limits 0.90x, 0.85x, ... of the
//     plain peak down to the smallest fraction AUTO meets (then refined by
//     bisection): the extra compute of AUTO, ECHO, CHEN_SQRT (where they meet
//     the limit) and OPTIMAL (on graphs up to --milp_max_ops ops), and AUTO's
//     gap to OPTIMAL.
//   echo_plan_bench stash [--graphs=a.pb,...] [--ratio=0.05]
//                         [--device=h100-80gb] [--milp_seconds=60]
//                         [--milp_max_nonzeros=250000]
//     AUTO's stash against the exact optimum of the stash objective (policy
//     OPTIMAL, objective stash_bytes) on captured graphs (default: the
//     suite's in tests/data/graphs), priced on a catalog device; a graph
//     whose MILP is over the size limit gets AUTO against the cut's bound.
//   echo_plan_bench speed [--max_ops=1000000] [--min_ops=0] [--repeats=3]
//                         [--family=lstm|transformer] [--auto_only]
//     Plan time per policy on generated LSTM-attention and transformer
//     training graphs of ~1k to ~1M ops, and the log-log growth exponent.
//     --family and --min_ops pick one graph out, e.g. to profile it;
//     --auto_only times AUTO alone; --write_graphs=DIR also writes each graph
//     as DIR/<family>_<scale>.pb (echo.v1.Graph, the costs as each op's
//     relative_cost), e.g. to time `echoctl plan` through echod; --digest
//     adds a column with a fingerprint of AUTO's schedule, to check that a
//     change keeps the plans.
//   echo_plan_bench show
//   [--graph=NAME|lstm:T|transformer:L|text:PATH|file:PATH]
//                        [--policy=auto] [--fraction=F|--ratio=R] [--depth=D]
//                        [--device=h100-80gb] [--all]
//     One plan: its message, its regions (20, or --all) and the peak's lower
//     bound. NAME is a Checkmate graph; file:PATH a captured echo.v1.Graph,
//     priced on --device.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "adapter/graph_convert.h"
#include "bench_flags.h"
#include "model_graphs.h"
#include "planner/byte_size.h"
#include "planner/checkmate_import.h"
#include "planner/compose/plan_composer.h"
#include "planner/cost_model.h"
#include "planner/device_catalog.h"
#include "planner/recompute/plan_report.h"
#include "planner/text_format.h"

namespace echo::bench {
namespace {

using planner::Graph;
using planner::kDefaultMaxOverheadRatio;
using planner::kDefaultSolverMaxNonzeros;
using planner::kDefaultSolverTimeLimitSeconds;
using planner::RecomputePlan;
using planner::RecomputePlanOptions;
using planner::RecomputePolicy;

std::optional<RecomputePlan> Plan(
    const Graph& graph, const std::vector<double>& costs,
    RecomputePolicy policy, std::optional<int64_t> limit,
    std::optional<double> ratio = std::nullopt,
    double seconds = kDefaultSolverTimeLimitSeconds,
    int64_t max_nonzeros = kDefaultSolverMaxNonzeros) {
  RecomputePlanOptions options;
  options.policy = policy;
  options.memory_limit_bytes = limit;
  options.max_overhead_ratio = ratio;
  options.solver_time_limit_seconds = seconds;
  options.solver_max_nonzeros = max_nonzeros;
  absl::StatusOr<RecomputePlan> plan =
      planner::GenerateRecomputePlan(graph, costs, options);
  if (!plan.ok()) {
    std::fprintf(stderr, "%s on %s: %s\n",
                 std::string(planner::RecomputePolicyName(policy)).c_str(),
                 graph.name().c_str(), plan.status().ToString().c_str());
    return std::nullopt;
  }
  return *std::move(plan);
}

// A fingerprint of a plan's schedule (FNV-1a over its executions), so that
// two builds can be checked to plan identically (speed --digest).
uint64_t ScheduleDigest(const planner::Schedule& schedule) {
  uint64_t hash = 1469598103934665603ull;
  for (const planner::Execution& e : schedule) {
    const uint64_t item = (static_cast<uint64_t>(e.op) << 1) | e.recompute;
    hash = (hash ^ item) * 1099511628211ull;
  }
  return hash;
}

std::string Percent(double ratio) {
  return absl::StrFormat("%.2f%%", 100 * ratio);
}

int Quality(const std::map<std::string, std::string>& flags) {
  const double milp_seconds =
      FlagDouble(flags, "milp_seconds", kDefaultSolverTimeLimitSeconds);
  const double milp_max_ops = FlagDouble(flags, "milp_max_ops", 100);
  const int64_t milp_max_nonzeros = static_cast<int64_t>(
      FlagDouble(flags, "milp_max_nonzeros", kDefaultSolverMaxNonzeros));
  std::vector<std::string> names = {
      "vgg16_b256_train", "vgg19_b256_train", "fcn8_vgg_b32_train",
      "mobilenet_b512_train", "resnet50_b256_train"};
  if (auto it = flags.find("graphs"); it != flags.end()) {
    names = absl::StrSplit(it->second, ',');
  }
  std::printf(
      "| graph | ops | limit (x plain) | AUTO extra | ECHO extra | CHEN extra "
      "| OPTIMAL extra (status, bound) | AUTO gap to OPTIMAL | AUTO ms | "
      "OPTIMAL s |\n|---|---|---|---|---|---|---|---|---|---|\n");
  std::vector<std::string> summary;
  for (const std::string& name : names) {
    std::ifstream in(std::string(ECHO_TEST_DATA_DIR) + "/checkmate/" + name +
                     ".json");
    std::stringstream text;
    text << in.rdbuf();
    absl::StatusOr<Graph> graph = planner::ImportCheckmateJson(text.str());
    if (!graph.ok()) {
      std::fprintf(stderr, "%s: %s\n", name.c_str(),
                   graph.status().ToString().c_str());
      return 1;
    }
    std::vector<double> costs;
    for (const planner::Op& op : graph->ops())
      costs.push_back(op.relative_cost);
    const std::optional<RecomputePlan> none =
        Plan(*graph, costs, RecomputePolicy::kNone, std::nullopt);
    const std::optional<RecomputePlan> echo =
        Plan(*graph, costs, RecomputePolicy::kEcho, std::nullopt);
    const std::optional<RecomputePlan> chen =
        Plan(*graph, costs, RecomputePolicy::kChenSqrt, std::nullopt);
    const int64_t plain = none->baseline_peak_bytes;
    const bool run_milp = graph->num_ops() <= milp_max_ops && milp_seconds > 0;

    auto row = [&](double fraction) -> bool {
      const int64_t limit = static_cast<int64_t>(fraction * plain);
      const auto start = std::chrono::steady_clock::now();
      std::optional<RecomputePlan> mine =
          Plan(*graph, costs, RecomputePolicy::kAuto, limit);
      const double auto_ms = std::chrono::duration<double, std::milli>(
                                 std::chrono::steady_clock::now() - start)
                                 .count();
      if (!mine.has_value() || !mine->feasible) return false;
      auto baseline_cell = [&](const std::optional<RecomputePlan>& p) {
        return p.has_value() && p->planned_peak_bytes <= limit
                   ? Percent(p->recompute_overhead_ratio)
                   : std::string("—");
      };
      std::string optimal_cell = "—", gap_cell = "—", optimal_seconds = "—";
      if (run_milp) {
        std::optional<RecomputePlan> best =
            Plan(*graph, costs, RecomputePolicy::kOptimal, limit, std::nullopt,
                 milp_seconds, milp_max_nonzeros);
        if (best.has_value()) {
          optimal_seconds = absl::StrFormat("%.1f", best->solve_time_seconds);
          const double base = best->baseline_compute_cost;
          optimal_cell = absl::StrFormat(
              "%s (%s, %s)",
              best->feasible ? Percent(best->recompute_overhead_ratio)
                             : std::string("none"),
              best->solver_status, Percent(best->solver_bound_cost / base));
          if (best->feasible) {
            const double gap =
                best->recompute_cost > 0
                    ? mine->recompute_cost / best->recompute_cost - 1
                    : (mine->recompute_cost > 0 ? INFINITY : 0);
            gap_cell = absl::StrFormat(
                "%+.1f%% (%+.2f%% of base)", 100 * gap,
                100 * (mine->recompute_cost - best->recompute_cost) / base);
          }
        }
      }
      std::printf("| %s | %d | %.3f | %s | %s | %s | %s | %s | %.1f | %s |\n",
                  name.c_str(), graph->num_ops(), fraction,
                  Percent(mine->recompute_overhead_ratio).c_str(),
                  baseline_cell(echo).c_str(), baseline_cell(chen).c_str(),
                  optimal_cell.c_str(), gap_cell.c_str(), auto_ms,
                  optimal_seconds.c_str());
      std::fflush(stdout);
      return true;
    };
    double feasible = 1.0, infeasible = 0;
    if (auto it = flags.find("fractions"); it != flags.end()) {
      for (absl::string_view f : absl::StrSplit(it->second, ',')) {
        double fraction = 0;
        if (absl::SimpleAtod(f, &fraction)) row(fraction);
      }
      continue;
    }
    for (double fraction = 0.9; fraction > 0.04; fraction -= 0.05) {
      fraction = std::round(fraction * 100) / 100;
      if (!row(fraction)) {
        infeasible = fraction;
        break;
      }
      feasible = fraction;
    }
    for (int refine = 0; refine < 4 && infeasible > 0; ++refine) {
      const double mid = std::round((feasible + infeasible) / 2 * 1000) / 1000;
      if (mid == feasible || mid == infeasible) break;
      if (row(mid)) {
        feasible = mid;
      } else {
        infeasible = mid;
      }
    }
    summary.push_back(absl::StrFormat(
        "| %s | %d | %d | %.3f | %.3f |", name, graph->num_ops(), plain,
        feasible, static_cast<double>(none->peak_lower_bound_bytes) / plain));
  }
  std::printf(
      "\n| graph | ops | plain peak (bytes) | smallest AUTO fraction | lower "
      "bound fraction |\n|---|---|---|---|---|\n");
  for (const std::string& line : summary) std::printf("%s\n", line.c_str());
  return 0;
}

// Prints one plan's summary and regions (for looking into a result).
int Show(const std::map<std::string, std::string>& flags) {
  const std::string name =
      flags.count("graph") ? flags.at("graph") : "vgg16_b256_train";
  absl::StatusOr<Graph> graph;
  std::vector<double> costs;
  int scale = 0;
  if (absl::StartsWith(name, "lstm:") ||
      absl::StartsWith(name, "transformer:")) {
    if (!absl::SimpleAtoi(name.substr(name.find(':') + 1), &scale)) return 2;
    ModelGraph model = absl::StartsWith(name, "lstm:")
                           ? MakeLstmAttentionGraph(4, scale, 128, 1024)
                           : MakeTransformerGraph(scale, 8, 1024, 1024, 16);
    graph = std::move(model.graph);
    costs = std::move(model.op_costs);
  } else if (absl::StartsWith(name, "text:")) {
    // A graph in the text format of planner/text_format.h.
    std::ifstream in(name.substr(5));
    std::stringstream text;
    text << in.rdbuf();
    graph = planner::ParseTextGraph(text.str());
    if (!graph.ok()) {
      std::fprintf(stderr, "%s\n", graph.status().ToString().c_str());
      return 1;
    }
    for (const planner::Op& op : graph->ops())
      costs.push_back(op.relative_cost);
  } else if (absl::StartsWith(name, "file:")) {
    // A captured graph (echo.v1.Graph), priced on --device.
    const std::string path = name.substr(5);
    std::optional<Graph> loaded = LoadGraphOrReport(path);
    absl::StatusOr<planner::DeviceSpec> device = planner::FindCatalogDevice(
        flags.count("device") ? flags.at("device") : "h100-80gb");
    if (!device.ok()) {
      std::fprintf(stderr, "%s\n", device.status().ToString().c_str());
      return 1;
    }
    if (!loaded.has_value()) return 1;
    std::optional<std::vector<double>> priced =
        PriceOrReport(path, *loaded, *device);
    if (!priced.has_value()) return 1;
    graph = *std::move(loaded);
    costs = *std::move(priced);
  } else {
    std::ifstream in(std::string(ECHO_TEST_DATA_DIR) + "/checkmate/" + name +
                     ".json");
    std::stringstream text;
    text << in.rdbuf();
    graph = planner::ImportCheckmateJson(text.str());
    if (!graph.ok()) return 1;
    for (const planner::Op& op : graph->ops())
      costs.push_back(op.relative_cost);
  }
  absl::StatusOr<RecomputePolicy> policy = planner::ParseRecomputePolicy(
      flags.count("policy") ? flags.at("policy") : "auto");
  if (!policy.ok()) return 1;
  const int64_t plain = planner::SimulatePlain(*graph).peak_bytes;
  std::optional<int64_t> limit;
  if (flags.count("fraction")) {
    limit = static_cast<int64_t>(FlagDouble(flags, "fraction", 1) * plain);
  }
  std::optional<double> ratio;
  if (flags.count("ratio"))
    ratio = FlagDouble(flags, "ratio", kDefaultMaxOverheadRatio);
  RecomputePlanOptions options;
  options.policy = *policy;
  options.memory_limit_bytes = limit;
  options.max_overhead_ratio = ratio;
  options.solver_time_limit_seconds =
      FlagDouble(flags, "milp_seconds", kDefaultSolverTimeLimitSeconds);
  options.max_recompute_depth = static_cast<int>(FlagDouble(flags, "depth", 0));
  absl::StatusOr<RecomputePlan> plan =
      planner::GenerateRecomputePlan(*graph, costs, options);
  if (!plan.ok()) {
    std::fprintf(stderr, "%s\n", plan.status().ToString().c_str());
    return 1;
  }
  std::printf("%s\n", plan->message.c_str());
  const size_t shown = flags.count("all") ? plan->regions.size() : 20;
  for (size_t i = 0; i < plan->regions.size() && i < shown; ++i) {
    std::printf("  %s\n", plan->regions[i].explanation.c_str());
  }
  std::printf("lower bound %s (%.3fx plain)\n",
              planner::HumanBytes(plan->peak_lower_bound_bytes).c_str(),
              static_cast<double>(plan->peak_lower_bound_bytes) /
                  plan->baseline_peak_bytes);
  return 0;
}

// DIR/<first word of the family>_<scale>.pb, with the op costs in the proto.
void WriteGraph(const ModelGraph& model, const std::string& dir,
                const std::string& family, int scale) {
  v1::Graph proto = adapter::GraphToProto(model.graph);
  for (int i = 0; i < proto.ops_size(); ++i) {
    proto.mutable_ops(i)->set_relative_cost(model.op_costs[i]);
  }
  const std::string path = absl::StrCat(
      dir, "/", family.substr(0, family.find(' ')), "_", scale, ".pb");
  std::ofstream out(path, std::ios::binary);
  if (!proto.SerializeToOstream(&out)) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
  }
}

int Speed(const std::map<std::string, std::string>& flags) {
  const double max_ops = FlagDouble(flags, "max_ops", 1e6);
  const double min_ops = FlagDouble(flags, "min_ops", 0);
  const int repeats = static_cast<int>(FlagDouble(flags, "repeats", 3));
  const std::string only =
      flags.count("family") ? flags.at("family") : std::string();
  struct Family {
    std::string name;
    std::function<ModelGraph(int)> make;  // by scale
    std::vector<int> scales;
  };
  const std::vector<Family> families = {
      {"lstm_attention (4 layers, T steps)",
       [](int steps) { return MakeLstmAttentionGraph(4, steps, 128, 1024); },
       {8, 80, 800, 8000}},
      {"transformer (L layers)",
       [](int layers) {
         return MakeTransformerGraph(layers, 8, 1024, 1024, 16);
       },
       {28, 280, 2800, 28000}},
  };
  const std::vector<RecomputePolicy> policies = {
      RecomputePolicy::kAuto, RecomputePolicy::kEcho,
      RecomputePolicy::kChenSqrt, RecomputePolicy::kNone};
  std::printf(
      "| graph | ops | AUTO ms | ECHO ms | CHEN ms | NONE ms | AUTO peak "
      "reduction | AUTO extra |\n|---|---|---|---|---|---|---|---|\n");
  for (const Family& family : families) {
    if (!absl::StartsWith(family.name, only)) continue;
    std::vector<std::pair<double, double>> points;  // (ops, auto ms)
    for (int scale : family.scales) {
      ModelGraph model = family.make(scale);
      if (model.graph.num_ops() > max_ops * 1.5) break;
      if (model.graph.num_ops() < min_ops) continue;
      if (flags.count("write_graphs"))
        WriteGraph(model, flags.at("write_graphs"), family.name, scale);
      std::vector<double> ms;
      std::optional<RecomputePlan> auto_plan;
      for (RecomputePolicy policy : policies) {
        double best = INFINITY;
        // --auto_only: the other columns print inf (e.g. to profile AUTO).
        const bool skip =
            flags.count("auto_only") && policy != RecomputePolicy::kAuto;
        for (int r = 0; r < repeats && !skip; ++r) {
          const auto start = std::chrono::steady_clock::now();
          std::optional<RecomputePlan> plan =
              Plan(model.graph, model.op_costs, policy, std::nullopt);
          best = std::min(best, std::chrono::duration<double, std::milli>(
                                    std::chrono::steady_clock::now() - start)
                                    .count());
          if (policy == RecomputePolicy::kAuto) auto_plan = plan;
          if (best > 20000) break;
        }
        ms.push_back(best);
      }
      points.push_back({static_cast<double>(model.graph.num_ops()), ms[0]});
      const std::string digest =
          flags.count("digest")
              ? absl::StrFormat(" %016x |", ScheduleDigest(auto_plan->schedule))
              : "";
      std::printf(
          "| %s, %d | %d | %.2f | %.2f | %.2f | %.2f | %.2fx | %s |%s\n",
          family.name.c_str(), scale, model.graph.num_ops(), ms[0], ms[1],
          ms[2], ms[3],
          static_cast<double>(auto_plan->baseline_peak_bytes) /
              auto_plan->planned_peak_bytes,
          Percent(auto_plan->recompute_overhead_ratio).c_str(), digest.c_str());
      std::fflush(stdout);
    }
    if (points.size() >= 2) {
      // Least-squares slope of log(ms) over log(ops).
      double sx = 0, sy = 0, sxx = 0, sxy = 0;
      for (const auto& [ops, ms] : points) {
        const double x = std::log(ops), y = std::log(ms);
        sx += x;
        sy += y;
        sxx += x * x;
        sxy += x * y;
      }
      const double n = static_cast<double>(points.size());
      const double slope = (n * sxy - sx * sy) / (n * sxx - sx * sx);
      std::printf("| %s: AUTO growth exponent | | %.2f | | | | | |\n",
                  family.name.c_str(), slope);
    }
  }
  return 0;
}

}  // namespace
}  // namespace echo::bench

namespace echo::bench {
namespace {

// AUTO's stash against the exact optimum (policy OPTIMAL with objective
// stash_bytes, planner/recompute/passes/stash_milp.h) on captured graphs,
// priced on a catalog device.
int Stash(const std::map<std::string, std::string>& flags) {
  const double ratio = FlagDouble(flags, "ratio", kDefaultMaxOverheadRatio);
  const double seconds =
      FlagDouble(flags, "milp_seconds", kDefaultSolverTimeLimitSeconds);
  const std::string device_name =
      flags.count("device") ? flags.at("device") : "h100-80gb";
  std::vector<std::string> paths;
  for (const char* name :
       {"nmt", "transformer", "gpt", "resnet50", "deepspeech2", "hf_gpt2"}) {
    paths.push_back(absl::StrCat(ECHO_TEST_DATA_DIR, "/graphs/", name, ".pb"));
  }
  if (auto it = flags.find("graphs"); it != flags.end()) {
    paths = absl::StrSplit(it->second, ',');
  }
  absl::StatusOr<planner::DeviceSpec> device =
      planner::FindCatalogDevice(device_name);
  if (!device.ok()) {
    std::fprintf(stderr, "%s\n", device.status().ToString().c_str());
    return 1;
  }
  std::printf(
      "| graph | ops | plain stash | AUTO stash | exact stash (status) | AUTO "
      "above exact | AUTO's cut bound | AUTO ms | exact s |\n"
      "|---|---|---|---|---|---|---|---|---|\n");
  for (const std::string& path : paths) {
    const std::optional<Graph> graph = LoadGraphOrReport(path);
    if (!graph.has_value()) return 1;
    const std::optional<std::vector<double>> priced =
        PriceOrReport(path, *graph, *device);
    if (!priced.has_value()) return 1;
    const std::vector<double>& costs = *priced;
    RecomputePlanOptions options;
    options.max_overhead_ratio = ratio;
    options.objective = planner::RecomputeObjective::kStashBytes;
    options.solver_time_limit_seconds = seconds;
    options.solver_max_nonzeros = static_cast<int64_t>(
        FlagDouble(flags, "milp_max_nonzeros",
                   static_cast<double>(kDefaultSolverMaxNonzeros)));
    absl::StatusOr<RecomputePlan> automatic =
        planner::GenerateRecomputePlan(*graph, costs, options);
    if (!automatic.ok()) {
      std::fprintf(stderr, "%s: %s\n", path.c_str(),
                   automatic.status().ToString().c_str());
      return 1;
    }
    options.policy = RecomputePolicy::kOptimal;
    absl::StatusOr<RecomputePlan> exact =
        planner::GenerateRecomputePlan(*graph, costs, options);
    auto above = [&](int64_t reference) {
      return absl::StrFormat(
          "%.3f%%",
          100 * (static_cast<double>(automatic->stash_bytes) /
                     static_cast<double>(std::max<int64_t>(1, reference)) -
                 1));
    };
    // Past the MILP's size limit the row still shows how far AUTO can be
    // from the exact optimum: at most its distance to the cut's bound.
    std::string exact_cell, above_cell, exact_seconds = "—";
    if (exact.ok()) {
      exact_cell = absl::StrFormat(
          "%s (%s, bound %s)", planner::HumanBytes(exact->stash_bytes),
          exact->solver_status,
          planner::HumanBytes(exact->stash_lower_bound_bytes));
      above_cell = above(exact->stash_bytes);
      exact_seconds = absl::StrFormat("%.2f", exact->solve_time_seconds);
    } else if (absl::IsFailedPrecondition(exact.status())) {
      exact_cell = "not solved (over solver_max_nonzeros)";
      above_cell =
          absl::StrCat("at most ", above(automatic->stash_lower_bound_bytes));
    } else {
      std::fprintf(stderr, "%s: %s\n", path.c_str(),
                   exact.status().ToString().c_str());
      return 1;
    }
    const int64_t plain = planner::StashBytes(
        *graph, planner::PlainSchedule(*graph), options.memory);
    std::printf("| %s | %d | %s | %s | %s | %s | %s | %.1f | %s |\n",
                graph->name().c_str(), graph->num_ops(),
                planner::HumanBytes(plain).c_str(),
                planner::HumanBytes(automatic->stash_bytes).c_str(),
                exact_cell.c_str(), above_cell.c_str(),
                planner::HumanBytes(automatic->stash_lower_bound_bytes).c_str(),
                1e3 * automatic->solve_time_seconds, exact_seconds.c_str());
  }
  return 0;
}

}  // namespace
}  // namespace echo::bench

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const auto flags = echo::bench::ParseFlags(argc, argv, 2);
  if (mode == "quality") return echo::bench::Quality(flags);
  if (mode == "speed") return echo::bench::Speed(flags);
  if (mode == "stash") return echo::bench::Stash(flags);
  if (mode == "show") return echo::bench::Show(flags);
  std::fprintf(stderr, "usage: %s quality|speed|stash [--flags]\n", argv[0]);
  return 2;
}
