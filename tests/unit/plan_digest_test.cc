// The same plans as before: each policy's plan of the suite's graphs (the
// Checkmate graphs with their relative costs, the captured graphs priced on
// an H100), told as a line (feasible, peak, stash, extra compute, chunks and
// a digest of the schedule and stash), against tests/data/plan_digests.txt.
// A change meant to keep every plan (a refactor, a file split, a faster
// search) keeps every line; one meant to plan differently rewrites the file
// with ECHO_UPDATE_PLAN_DIGESTS=1 and shows in review which plans moved.
// OPTIMAL is left out: its solver stops at a time limit.
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "adapter/graph_convert.h"
#include "adapter/graph_file.h"
#include "gtest/gtest.h"
#include "planner/compose/plan_composer.h"
#include "planner/cost_model.h"
#include "planner/memory_simulator.h"
#include "test_util.h"

namespace echo::planner {
namespace {

const char kDigestFile[] = ECHO_TEST_DATA_DIR "/plan_digests.txt";

struct Priced {
  std::string name;
  Graph graph;
  std::vector<double> costs;
  bool captured;  // priced in seconds on a device: chunking applies
};

std::vector<Priced> SuiteGraphs() {
  std::vector<Priced> graphs;
  for (const char* name :
       {"vgg16_b256_train", "vgg19_b256_train", "mobilenet_b512_train",
        "resnet50_b256_train", "fcn8_vgg_b32_train"}) {
    Graph graph = testing::LoadCheckmate(name);
    std::vector<double> costs = testing::RelativeCosts(graph);
    graphs.push_back({name, std::move(graph), std::move(costs), false});
  }
  const DeviceSpec device = testing::CatalogDevice("h100-80gb");
  for (const char* name :
       {"deepspeech2", "gpt", "hf_gpt2", "nmt", "resnet50", "transformer"}) {
    Graph graph = testing::ValueOrFail(
        adapter::GraphFromProto(testing::ValueOrFail(adapter::LoadGraphFile(
            absl::StrFormat("%s/graphs/%s.pb", ECHO_TEST_DATA_DIR, name)))));
    std::vector<double> costs =
        testing::ValueOrFail(EstimateOpCosts(graph, &device, nullptr)).Costs();
    graphs.push_back({name, std::move(graph), std::move(costs), true});
  }
  return graphs;
}

// FNV-1a over the schedule's executions, then the stash.
uint64_t PlanDigest(const RecomputePlan& plan) {
  uint64_t hash = 1469598103934665603ull;
  auto mix = [&hash](uint64_t item) {
    hash = (hash ^ item) * 1099511628211ull;
  };
  for (const Execution& e : plan.schedule) {
    mix((static_cast<uint64_t>(e.op) << 1) | e.recompute);
  }
  mix(~0ull);
  for (const TensorIndex t : plan.stash) mix(static_cast<uint64_t>(t));
  return hash;
}

std::string Line(const std::string& graph, const std::string& plan_name,
                 const RecomputePlan& plan) {
  int chunks = 0;
  for (const ChunkedRegionReport& region : plan.chunked_regions) {
    chunks += region.chunks;
  }
  return absl::StrFormat(
      "%s %s feasible=%d peak=%d stash=%d extra=%.6g chunks=%d digest=%016x",
      graph, plan_name, plan.feasible ? 1 : 0, plan.planned_peak_bytes,
      plan.stash_bytes, plan.recompute_overhead_ratio, chunks,
      PlanDigest(plan));
}

// Every plan of every graph, one line each, in a fixed order.
std::vector<std::string> PlanLines() {
  std::vector<std::string> lines;
  for (const Priced& priced : SuiteGraphs()) {
    const int64_t plain_peak = SimulatePlain(priced.graph).peak_bytes;
    struct Case {
      std::string name;
      RecomputePlanOptions options;
    };
    std::vector<Case> cases;
    for (RecomputePolicy policy :
         {RecomputePolicy::kEcho, RecomputePolicy::kChenSqrt}) {
      RecomputePlanOptions options;
      options.policy = policy;
      cases.push_back({std::string(RecomputePolicyName(policy)), options});
    }
    for (double ratio : {0.05, 0.2}) {
      RecomputePlanOptions options;
      options.max_overhead_ratio = ratio;
      cases.push_back({absl::StrFormat("AUTO@%g", ratio), options});
      if (priced.captured) {
        options.chunking.enabled = true;
        options.chunking.launch_cost =
            CostModelOptions().launch_overhead_seconds;
        cases.push_back({absl::StrFormat("AUTO+chunks@%g", ratio), options});
      }
    }
    RecomputePlanOptions limit;
    limit.memory_limit_bytes = plain_peak * 7 / 10;
    cases.push_back({"AUTO<=0.7peak", limit});
    for (const Case& c : cases) {
      const absl::StatusOr<RecomputePlan> plan =
          GenerateRecomputePlan(priced.graph, priced.costs, c.options);
      lines.push_back(plan.ok()
                          ? Line(priced.name, c.name, *plan)
                          : absl::StrFormat("%s %s error=%s", priced.name,
                                            c.name, plan.status().ToString()));
    }
  }
  return lines;
}

TEST(PlanDigestTest, TheSuitesPlansAreTheRecordedOnes) {
  const std::vector<std::string> lines = PlanLines();
  if (std::getenv("ECHO_UPDATE_PLAN_DIGESTS") != nullptr) {
    std::ofstream out(kDigestFile);
    out << "# tests/unit/plan_digest_test.cc: the suite's plans. Rewrite with\n"
           "# ECHO_UPDATE_PLAN_DIGESTS=1 only when plans are meant to "
           "change.\n";
    for (const std::string& line : lines) out << line << "\n";
    GTEST_SKIP() << "rewrote " << kDigestFile << " (" << lines.size()
                 << " plans)";
  }
  std::ifstream in(kDigestFile);
  ASSERT_TRUE(in.good()) << kDigestFile;
  std::vector<std::string> recorded;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line[0] != '#') recorded.push_back(line);
  }
  ASSERT_EQ(recorded.size(), lines.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(lines[i], recorded[i]);
  }
}

}  // namespace
}  // namespace echo::planner
