// Policy OPTIMAL in echo_milp_worker child processes: plans as before (by
// fingerprint too), a solver crash is INTERNAL for that request only, the
// address-space limit is RESOURCE_EXHAUSTED, a too-big model never starts a
// child, and deadlines and drains kill the child (in-process echod; SIGTERM to
// a real echod).
#include "server/optimal_worker.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "adapter/graph_convert.h"
#include "adapter/graph_file.h"
#include "adapter/plan_convert.h"
#include "client/planner_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "http_get.h"
#include "in_process_echod.h"
#include "long_chain.h"
#include "loopback_server.h"
#include "planner/compose/plan_composer.h"
#include "planner/memory_simulator.h"
#include "server/child_process.h"
#include "server/echo_server.h"
#include "server/milp_worker.pb.h"
#include "server/pass_codec.h"
#include "tests/unit/test_util.h"
#include "tests/unit/too_big_graph.h"

namespace echo {
namespace {

using ::grpc::health::v1::HealthCheckResponse;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The processes whose parent is `pid`, from /proc/*/stat (whose fourth
// field is the parent's id; /proc/PID/task/TID/children is not in every
// kernel).
std::vector<pid_t> ChildrenOf(pid_t pid) {
  std::vector<pid_t> children;
  std::error_code error;
  for (const auto& entry :
       std::filesystem::directory_iterator("/proc", error)) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "stat");
    std::string stat((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
    const size_t comm_end = stat.rfind(')');
    if (comm_end == std::string::npos) continue;
    std::istringstream fields(stat.substr(comm_end + 1));
    std::string state;
    pid_t parent = 0;
    if (fields >> state >> parent && parent == pid) {
      children.push_back(std::stoi(name));
    }
  }
  return children;
}

// Polls `done` every 5 ms for up to `seconds`.
template <typename Predicate>
bool WaitFor(double seconds, Predicate done) {
  const auto start = Clock::now();
  while (!done()) {
    if (SecondsSince(start) > seconds) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// OPTIMAL on a Checkmate graph at `fraction` of its plain peak, or at
// `fraction` bytes when it is above 1.
v1::GenerateRecomputePlanRequest OptimalRequest(const std::string& checkmate,
                                                double fraction,
                                                double time_limit_seconds) {
  v1::GenerateRecomputePlanRequest request;
  *request.mutable_graph() = testing::ValueOrFail(adapter::LoadGraphFile(
      absl::StrCat(ECHO_TEST_DATA_DIR, "/checkmate/", checkmate, ".json")));
  const planner::Graph graph =
      testing::ValueOrFail(adapter::GraphFromProto(request.graph()));
  const double plain_peak = static_cast<double>(
      planner::SimulatePlain(graph, planner::MemoryModelOptions()).peak_bytes);
  request.set_policy(v1::RECOMPUTE_POLICY_OPTIMAL);
  request.set_memory_limit_bytes(
      static_cast<int64_t>(fraction > 1 ? fraction : fraction * plain_peak));
  request.set_solver_time_limit_seconds(time_limit_seconds);
  return request;
}

// VGG19 at 0.8x of its plain peak: CBC needs 20-100 s to prove optimality,
// so the solve is still running when a test stops it.
v1::GenerateRecomputePlanRequest LongOptimalRequest() {
  return OptimalRequest("vgg19_b256_train", 0.8, 300);
}

class OptimalWorkerTest : public ::testing::Test {
 protected:
  void StartServer(server::ServerOptions options = server::ServerOptions()) {
    ASSERT_OK_AND_ASSIGN(server_,
                         server::EchoServer::Start(testing::Loopback(options)));
    client_ = Client(120);
  }

  std::unique_ptr<client::PlannerClient> Client(double timeout_seconds) {
    return testing::ClientOf(*server_, timeout_seconds);
  }

  // A server whose OPTIMAL worker is a shell script running `command`.
  void StartServerWithWorkerScript(const std::string& command) {
    worker_script_ =
        absl::StrCat(::testing::TempDir(), "/fake_worker_", ::getpid(), ".sh");
    std::ofstream(worker_script_) << "#!/bin/sh\n" << command << "\n";
    std::filesystem::permissions(worker_script_,
                                 std::filesystem::perms::owner_all);
    server::ServerOptions options;
    options.optimal.worker_path = worker_script_;
    StartServer(options);
  }

  void TearDown() override {
    server_.reset();
    if (!worker_script_.empty()) std::filesystem::remove(worker_script_);
  }

  // The server answers at once, and no worker process is left.
  void ExpectServingWithoutWorkers() {
    EXPECT_TRUE(WaitFor(1.0,
                        [&] {
                          return server_->live_optimal_workers() == 0 &&
                                 ChildrenOf(::getpid()).empty();
                        }))
        << server_->live_optimal_workers() << " workers still running";
    const auto start = Clock::now();
    auto health = client_->Health("");
    ASSERT_TRUE(health.ok()) << health.status();
    EXPECT_EQ(*health, HealthCheckResponse::SERVING);
    EXPECT_LT(SecondsSince(start), 1.0);
    v1::EstimateMemoryRequest estimate;
    *estimate.mutable_graph() = LongOptimalRequest().graph();
    EXPECT_OK(client_->EstimateMemory(estimate));
  }

  std::unique_ptr<server::EchoServer> server_;
  std::unique_ptr<client::PlannerClient> client_;
  std::string worker_script_;
};

TEST_F(OptimalWorkerTest, PlansInAChildProcessAsBefore) {
  StartServer();
  // VGG16 at 0.9x of its plain peak: CBC proves the optimum in about 1 s.
  const v1::GenerateRecomputePlanRequest request =
      OptimalRequest("vgg16_b256_train", 0.9, 60);
  auto plan = client_->GenerateRecomputePlan(request);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->feasible());
  EXPECT_EQ(plan->policy(), v1::RECOMPUTE_POLICY_OPTIMAL);
  EXPECT_EQ(plan->solver_status(), "optimal");
  EXPECT_LE(plan->planned_peak_bytes(), request.memory_limit_bytes());
  EXPECT_EQ(plan->baseline_peak_bytes(), 15825108992);
  EXPECT_EQ(plan->cost_unit(), "relative");  // filled by echod
  EXPECT_GT(plan->schedule_size(), 0);
  EXPECT_THAT(
      testing::HttpGet(server_->metrics_endpoint(), "/metrics"),
      HasSubstr("echo_plans_total{outcome=\"feasible\",policy=\"optimal\"} 1"));
  ExpectServingWithoutWorkers();
}

// echod plans OPTIMAL as every policy: only the pass runs in the child, and
// echod replays and reports its schedule. The answer is the in-process
// planner's, field for field.
TEST_F(OptimalWorkerTest, TheChildRunsThePassAndEchodReportsAsInProcess) {
  StartServer();
  const v1::GenerateRecomputePlanRequest request =
      OptimalRequest("vgg16_b256_train", 0.9, 60);
  ASSERT_OK_AND_ASSIGN(const v1::GenerateRecomputePlanResponse served,
                       client_->GenerateRecomputePlan(request));
  ASSERT_OK_AND_ASSIGN(const planner::Graph graph,
                       adapter::GraphFromProto(request.graph()));
  ASSERT_OK_AND_ASSIGN(const planner::RecomputePlanOptions options,
                       adapter::PlanOptionsFromProto(request));
  std::vector<double> costs;
  for (const v1::Op& op : request.graph().ops()) {
    costs.push_back(op.relative_cost());
  }
  ASSERT_OK_AND_ASSIGN(const planner::RecomputePlan plan,
                       planner::GenerateRecomputePlan(graph, costs, options));
  v1::GenerateRecomputePlanResponse in_process;
  adapter::FillPlanResponse(graph, plan, options.policy, &in_process);
  EXPECT_EQ(served.solver_status(), "optimal");
  EXPECT_EQ(served.plan_fingerprint(), in_process.plan_fingerprint());
  EXPECT_EQ(served.planned_peak_bytes(), in_process.planned_peak_bytes());
  EXPECT_EQ(served.recompute_cost(), in_process.recompute_cost());
  EXPECT_EQ(served.stash_bytes(), in_process.stash_bytes());
  EXPECT_EQ(served.regions_size(), in_process.regions_size());
  EXPECT_EQ(served.stash_tensor_ids_size(), in_process.stash_tensor_ids_size());
  EXPECT_EQ(served.solver_bound_cost(), in_process.solver_bound_cost());
  EXPECT_THAT(served.message(), StartsWith(in_process.message()));
  ExpectServingWithoutWorkers();
}

// OPTIMAL with objective stash_bytes is the exact optimum of the stash
// objective (stash_milp.h), through echod and its child, on the suite's
// captured graphs at CI sizes: its bound is its own stash, AUTO's minimum
// cut bound stays below it, and AUTO is within 2% of it (issue 24's bar;
// equal on all but ResNet-50 when written, 1 KiB above there).
TEST_F(OptimalWorkerTest, TheExactStashIsTheReferenceAutoIsWithinTwoPercentOf) {
  StartServer();
  for (const char* name :
       {"nmt", "transformer", "gpt", "resnet50", "hf_gpt2"}) {
    SCOPED_TRACE(name);
    v1::GenerateRecomputePlanRequest request;
    *request.mutable_graph() = testing::ValueOrFail(adapter::LoadGraphFile(
        absl::StrCat(ECHO_TEST_DATA_DIR, "/graphs/", name, ".pb")));
    request.mutable_device()->set_name("h100-80gb");
    request.set_max_overhead_ratio(0.05);
    request.set_objective(v1::RECOMPUTE_OBJECTIVE_STASH_BYTES);
    request.set_solver_time_limit_seconds(60);
    ASSERT_OK_AND_ASSIGN(const v1::GenerateRecomputePlanResponse automatic,
                         client_->GenerateRecomputePlan(request));
    request.set_policy(v1::RECOMPUTE_POLICY_OPTIMAL);
    ASSERT_OK_AND_ASSIGN(const v1::GenerateRecomputePlanResponse exact,
                         client_->GenerateRecomputePlan(request));
    EXPECT_EQ(exact.solver_status(), "optimal");
    EXPECT_EQ(exact.stash_lower_bound_bytes(), exact.stash_bytes());
    EXPECT_LE(exact.recompute_overhead_ratio(), 0.05 + 1e-9);
    EXPECT_LE(automatic.stash_lower_bound_bytes(), exact.stash_bytes());
    EXPECT_LE(exact.stash_bytes(), automatic.stash_bytes());
    EXPECT_LE(static_cast<double>(automatic.stash_bytes()),
              1.02 * static_cast<double>(exact.stash_bytes()));
    std::cout << name << ": stash AUTO " << automatic.stash_bytes()
              << ", exact " << exact.stash_bytes() << " bytes ("
              << exact.solve_time_seconds() << " s)\n";
  }
  ExpectServingWithoutWorkers();
}

// The child's reply is checked against the graph it was sent: a schedule
// naming an op the graph lacks is echod's INTERNAL error, not a plan (a
// worker that answers a well-formed reply without running anything).
TEST_F(OptimalWorkerTest, AReplyNamingAnUnknownOpIsRefused) {
  internal::MilpWorkerReply reply;
  v1::Execution* step = reply.mutable_result()->add_schedule();
  step->set_op_id("no_such_op");
  reply.mutable_result()->set_limit_reachable(true);
  std::string bytes;
  ASSERT_TRUE(reply.SerializeToString(&bytes));
  const std::string path =
      absl::StrCat(::testing::TempDir(), "/reply_", ::getpid(), ".bin");
  std::ofstream(path, std::ios::binary) << bytes;
  StartServerWithWorkerScript(absl::StrCat("cat >/dev/null; cat ", path));
  auto plan = client_->GenerateRecomputePlan(
      OptimalRequest("vgg16_b256_train", 0.9, 60));
  std::filesystem::remove(path);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(plan.status().message()),
              HasSubstr("answered a bad schedule: the plan's schedule names "
                        "unknown op 'no_such_op'"));
  ExpectServingWithoutWorkers();
}

TEST_F(OptimalWorkerTest, ASolverCrashIsInternalAndEchodKeepsServing) {
  // A worker that dies by SIGSEGV, as CBC does below.
  StartServerWithWorkerScript("kill -SEGV $$");
  auto plan = client_->GenerateRecomputePlan(
      OptimalRequest("vgg16_b256_train", 0.9, 60));
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(plan.status().message()),
              HasSubstr("OPTIMAL: the solver process crashed: killed by "
                        "signal 11 (SIGSEGV: Segmentation fault)"));
  ExpectServingWithoutWorkers();
  EXPECT_THAT(testing::HttpGet(server_->metrics_endpoint(), "/metrics"),
              HasSubstr("echo_requests_total{code=\"INTERNAL\",method="
                        "\"GenerateRecomputePlan\"} 1"));
}

TEST_F(OptimalWorkerTest, SigxcpuIsResourceExhausted) {
  // What RLIMIT_CPU sends (MilpWorkerProcessTest checks the real limit).
  StartServerWithWorkerScript("kill -XCPU $$");
  auto plan = client_->GenerateRecomputePlan(
      OptimalRequest("vgg16_b256_train", 0.9, 60));
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(plan.status().message()),
              HasSubstr("OPTIMAL: the solver used its CPU-time limit "
                        "(solver_time_limit_seconds 60 + 10 s)"));
  ExpectServingWithoutWorkers();
}

TEST_F(OptimalWorkerTest, CbcsCrashOnFcn8IsInternalAndEchodKeepsServing) {
  // CBC 2.10 segfaults in CglPreProcess::postProcess on this model when
  // its 1 s limit stops the search at some points and not at others (7 of
  // 14 runs of the worker on a loaded 2-core machine): the answer is a plan
  // or INTERNAL naming the signal, and echod serves on.
  StartServer();
  auto plan = client_->GenerateRecomputePlan(
      OptimalRequest("fcn8_vgg_b32_train", 8.4e9, 1));
  if (plan.ok()) {
    // Whatever CBC concluded (it has also said "infeasible" here, with
    // AUTO's plan under the limit as its start).
    EXPECT_EQ(plan->policy(), v1::RECOMPUTE_POLICY_OPTIMAL);
    EXPECT_FALSE(plan->solver_status().empty());
  } else if (plan.status().code() == absl::StatusCode::kResourceExhausted) {
    // On a machine too loaded for CBC to finish within its limits (seen
    // under parallel builds): the limit's answer, never a hang.
    EXPECT_THAT(std::string(plan.status().message()),
                HasSubstr("OPTIMAL: the solver"));
  } else {
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kInternal)
        << plan.status();
    EXPECT_THAT(std::string(plan.status().message()),
                HasSubstr("OPTIMAL: the solver process crashed: killed by "
                          "signal"));
  }
  ExpectServingWithoutWorkers();
}

TEST_F(OptimalWorkerTest, TheAddressSpaceLimitIsResourceExhausted) {
  server::ServerOptions options;
  options.optimal.memory_limit_bytes = 1 << 20;
  StartServer(options);
  auto plan = client_->GenerateRecomputePlan(
      OptimalRequest("vgg16_b256_train", 0.9, 60));
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(plan.status().message()),
              HasSubstr("limited to 1048576 bytes "
                        "(--optimal_memory_limit_bytes)"));
  ExpectServingWithoutWorkers();
}

TEST_F(OptimalWorkerTest, ATooBigModelIsRefusedBeforeAChildStarts) {
  // /bin/false as the worker: any child would make the answer INTERNAL.
  server::ServerOptions options;
  options.optimal.worker_path = "/bin/false";
  StartServer(options);
  v1::GenerateRecomputePlanRequest request;
  *request.mutable_graph() = testing::ValueOrFail(
      adapter::ParseGraph(testing::TooBigForOptimalText(),
                          adapter::GraphFormat::kEchoText, "chain"));
  request.set_policy(v1::RECOMPUTE_POLICY_OPTIMAL);
  request.set_memory_limit_bytes(10000);
  auto plan = client_->GenerateRecomputePlan(request);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(plan.status().message()),
              HasSubstr("over 250000 nonzeros (solver_max_nonzeros)"));

  // The same server does start /bin/false for a model of a fitting size.
  plan = client_->GenerateRecomputePlan(
      OptimalRequest("vgg16_b256_train", 0.9, 60));
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(plan.status().message()),
              HasSubstr("exited with status 1"));
}

// A registered graph: echod sends the child its graph converted back to a
// proto (adapter::GraphToProto), and the plan is the inline graph's.
TEST_F(OptimalWorkerTest, ARegisteredGraphPlansAsTheGraphInline) {
  StartServer();
  // VGG16 at 0.9x: CBC proves the optimum in about 1 s, so both solves end
  // at the same optimum, not at a time limit.
  v1::GenerateRecomputePlanRequest inline_request =
      OptimalRequest("vgg16_b256_train", 0.9, 30 * testing::kTimeScale);
  inline_request.set_include_timeline(true);
  v1::RegisterGraphRequest registration;
  *registration.mutable_graph() = inline_request.graph();
  ASSERT_OK_AND_ASSIGN(const v1::RegisterGraphResponse registered,
                       client_->RegisterGraph(registration));
  v1::GenerateRecomputePlanRequest by_fingerprint = inline_request;
  by_fingerprint.clear_graph();
  by_fingerprint.set_graph_fingerprint(registered.graph_fingerprint());

  ASSERT_OK_AND_ASSIGN(const v1::GenerateRecomputePlanResponse inline_plan,
                       client_->GenerateRecomputePlan(inline_request));
  ASSERT_OK_AND_ASSIGN(const v1::GenerateRecomputePlanResponse plan,
                       client_->GenerateRecomputePlan(by_fingerprint));
  EXPECT_EQ(plan.policy(), v1::RECOMPUTE_POLICY_OPTIMAL);
  EXPECT_EQ(plan.solver_status(), "optimal");
  EXPECT_EQ(inline_plan.solver_status(), "optimal");
  EXPECT_TRUE(plan.feasible());
  EXPECT_EQ(plan.baseline_peak_bytes(), 15825108992);
  EXPECT_EQ(plan.planned_peak_bytes(), inline_plan.planned_peak_bytes());
  EXPECT_LE(plan.planned_peak_bytes(), inline_request.memory_limit_bytes());
  EXPECT_EQ(plan.recompute_cost(), inline_plan.recompute_cost());
  EXPECT_EQ(plan.plan_fingerprint(), inline_plan.plan_fingerprint());
  ASSERT_EQ(plan.schedule_size(), inline_plan.schedule_size());
  for (int i = 0; i < plan.schedule_size(); ++i) {
    EXPECT_EQ(plan.schedule(i).op_id(), inline_plan.schedule(i).op_id()) << i;
    EXPECT_EQ(plan.schedule(i).recompute(), inline_plan.schedule(i).recompute())
        << i;
  }
  EXPECT_EQ(plan.cost_unit(), "relative");
  // The timeline is replayed by echod on the registered graph.
  EXPECT_EQ(plan.timeline().peak_bytes(), plan.planned_peak_bytes());

  // Asked again: the cached answer, no third solve.
  ASSERT_OK_AND_ASSIGN(const v1::GenerateRecomputePlanResponse cached,
                       client_->GenerateRecomputePlan(by_fingerprint));
  EXPECT_EQ(cached.plan_fingerprint(), plan.plan_fingerprint());
  EXPECT_THAT(
      testing::HttpGet(server_->metrics_endpoint(), "/metrics"),
      HasSubstr("echo_plans_total{outcome=\"feasible\",policy=\"optimal\"} 2"));
  ExpectServingWithoutWorkers();
}

TEST_F(OptimalWorkerTest, AMissingWorkerPathIsRefusedAtStart) {
  server::ServerOptions options;
  options.grpc_address = "127.0.0.1:0";
  options.metrics_address = "";
  options.optimal.worker_path = "/nonexistent/echo_milp_worker";
  auto server = server::EchoServer::Start(options);
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(server.status().message()),
              HasSubstr("--optimal_worker_path"));
}

TEST_F(OptimalWorkerTest, ADeadlineKillsTheChildAndEchodIsIdleWithinASecond) {
  StartServer();
  // 1 ms: the call may end before the child starts or just after; 3 s: the
  // child surely runs when the deadline passes.
  for (double deadline : {0.001, 3.0}) {
    SCOPED_TRACE(absl::StrCat("deadline ", deadline, " s"));
    std::unique_ptr<client::PlannerClient> hurried = Client(deadline);
    auto call = std::async(std::launch::async, [&] {
      return hurried->GenerateRecomputePlan(LongOptimalRequest());
    });
    if (deadline > 1) {
      EXPECT_TRUE(WaitFor(deadline, [&] {
        return server_->live_optimal_workers() == 1;
      })) << "the worker never started";
    }
    const auto plan = call.get();
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kDeadlineExceeded);
    ExpectServingWithoutWorkers();
  }
}

TEST_F(OptimalWorkerTest, ADrainKillsTheChildAtItsTimeout) {
  StartServer();
  auto call = std::async(std::launch::async, [&] {
    return client_->GenerateRecomputePlan(LongOptimalRequest());
  });
  ASSERT_TRUE(
      WaitFor(10, [&] { return server_->live_optimal_workers() == 1; }));
  const auto start = Clock::now();
  auto drained = std::async(std::launch::async, [&] {
    server_->Drain();  // drain_timeout_seconds = 1
    server_->Wait();
  });
  // While the call is in flight, health answers NOT_SERVING (it read
  // "connection refused" for the whole drain before).
  ASSERT_TRUE(WaitFor(2, [&] {
    const auto health = client_->Health();
    return health.ok() &&
           *health == grpc::health::v1::HealthCheckResponse::NOT_SERVING;
  })) << "health never answered NOT_SERVING during the drain";
  drained.get();
  EXPECT_LT(SecondsSince(start), 1.0 + 2.0);
  EXPECT_EQ(server_->live_optimal_workers(), 0);
  EXPECT_TRUE(ChildrenOf(::getpid()).empty());
  EXPECT_FALSE(call.get().ok());
}

// What the engine gives OPTIMAL's pass reaches the worker as it was
// (pass_codec.h), and a value out of range is refused by name.
TEST(PassCodecTest, OptionsRoundTripAndOutOfRangeIsRefused) {
  planner::RecomputePlanOptions options;
  options.policy = planner::RecomputePolicy::kOptimal;
  options.memory_limit_bytes = 123456789;
  options.objective = planner::RecomputeObjective::kStashBytes;
  options.solver_time_limit_seconds = 7.5;
  options.solver_max_nonzeros = 4242;
  options.max_recompute_depth = 3;
  options.memory.rounding_bytes = 512;
  options.auto_effort = 2;
  internal::PassOptions proto;
  server::PassOptionsToProto(options, &proto);
  ASSERT_OK_AND_ASSIGN(const planner::RecomputePlanOptions decoded,
                       server::PassOptionsFromProto(proto));
  EXPECT_EQ(decoded.policy, options.policy);
  EXPECT_EQ(decoded.memory_limit_bytes, options.memory_limit_bytes);
  EXPECT_EQ(decoded.objective, options.objective);
  EXPECT_EQ(decoded.solver_time_limit_seconds, 7.5);
  EXPECT_EQ(decoded.solver_max_nonzeros, 4242);
  EXPECT_EQ(decoded.max_recompute_depth, 3);
  EXPECT_EQ(decoded.memory.rounding_bytes, 512);
  EXPECT_EQ(decoded.auto_effort, 2);
  options.memory_limit_bytes.reset();
  internal::PassOptions unlimited;
  server::PassOptionsToProto(options, &unlimited);
  EXPECT_FALSE(server::PassOptionsFromProto(unlimited)->memory_limit_bytes);
  proto.set_policy(99);
  EXPECT_THAT(server::PassOptionsFromProto(proto).status().message(),
              HasSubstr("unknown policy 99"));
  proto.set_policy(0);
  proto.set_objective(-1);
  EXPECT_THAT(server::PassOptionsFromProto(proto).status().message(),
              HasSubstr("unknown objective -1"));
}

// The worker itself, run as echod runs it: its CPU-time limit ends a long
// solve by SIGXCPU.
TEST(MilpWorkerProcessTest, ItsCpuLimitEndsItBySigxcpu) {
  const v1::GenerateRecomputePlanRequest request = LongOptimalRequest();
  internal::MilpWorkerRequest work;
  *work.mutable_graph() = request.graph();
  planner::RecomputePlanOptions options;
  options.policy = planner::RecomputePolicy::kOptimal;
  options.memory_limit_bytes = request.memory_limit_bytes();
  options.solver_time_limit_seconds = request.solver_time_limit_seconds();
  server::PassOptionsToProto(options, work.mutable_options());
  // The graph's own costs: with equal costs CBC proves VGG19's optimum in
  // well under a CPU second.
  for (const v1::Op& op : work.graph().ops()) {
    work.add_op_costs(op.relative_cost());
  }
  server::ChildRun run;
  run.path = server::OptimalWorker(server::OptimalWorkerOptions()).path();
  run.args = {"--cpu_seconds=1", "--address_space_bytes=4294967296"};
  ASSERT_TRUE(work.SerializeToString(&run.input));
  run.wall_limit_seconds = 120;
  ASSERT_OK_AND_ASSIGN(const server::ChildResult result, server::RunChild(run));
  EXPECT_EQ(result.signal, SIGXCPU) << "exit code " << result.exit_code;
  EXPECT_GE(result.cpu_seconds, 0.9);
  EXPECT_LT(result.cpu_seconds, 2.5);
}

// echod on a Unix socket in the test's temporary folder, with `flags`
// besides the socket and no TCP or metrics port; the caller stops it.
pid_t StartEchod(const std::string& socket,
                 const std::vector<std::string>& flags) {
  std::vector<std::string> args = {
      ECHO_ECHOD, "--grpc_address=", "--unix_socket=" + socket,
      "--metrics_address=", "--profile_cache_dir=none"};
  args.insert(args.end(), flags.begin(), flags.end());
  const pid_t echod = ::fork();
  if (echod == 0) {
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    ::execv(ECHO_ECHOD, argv.data());
    ::_exit(127);
  }
  return echod;
}

// A real echod, stopped by SIGTERM with `request` in flight (its work in a
// child: OPTIMAL's solver, or AUTO's fork), exits within its drain timeout
// plus a margin and leaves no worker behind.
void ExpectSigtermExitsWithinTheDrainTimeout(
    const v1::GenerateRecomputePlanRequest& request) {
  const std::string socket =
      absl::StrCat(::testing::TempDir(), "/echod_", ::getpid(), ".sock");
  const pid_t echod =
      StartEchod(socket, {"--drain_timeout_seconds=1", "--log_level=warn"});
  ASSERT_GE(echod, 0);
  client::ClientOptions options;
  options.server = "unix://" + socket;
  options.timeout_seconds = 60;
  client::PlannerClient client(options);
  EXPECT_TRUE(WaitFor(20, [&] { return client.Health("").ok(); }));
  auto call = std::async(std::launch::async,
                         [&] { return client.GenerateRecomputePlan(request); });
  std::vector<pid_t> workers;
  // Long on a loaded machine: the AUTO request is 10 MB to read and convert.
  EXPECT_TRUE(WaitFor(30, [&] {
    workers = ChildrenOf(echod);
    return !workers.empty();
  })) << "echod never started a worker";

  const auto start = Clock::now();
  ASSERT_EQ(::kill(echod, SIGTERM), 0);
  int status = 0;
  ASSERT_TRUE(
      WaitFor(15, [&] { return ::waitpid(echod, &status, WNOHANG) == echod; }));
  const double seconds = SecondsSince(start);
  std::cout << "[ measured ] exited " << seconds * 1e3
            << " ms after SIGTERM (drain timeout 1 s)\n";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  // 1 s of drain plus a margin for a loaded machine; the work takes 10+ s.
  EXPECT_LT(seconds, 1.0 + 3.0);
  for (pid_t worker : workers) {
    EXPECT_TRUE(WaitFor(1.0, [&] { return ::kill(worker, 0) != 0; }))
        << "worker " << worker << " outlived echod";
  }
  EXPECT_FALSE(call.get().ok());
}

// A process's peak resident set (VmHWM), in bytes.
// A process's resident set (`field` "VmRSS:") or its peak ("VmHWM:"), in
// bytes.
int64_t ResidentBytesOf(pid_t pid, const std::string& field) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field, 0) == 0) {
      return std::stoll(line.substr(field.size())) << 10;
    }
  }
  return 0;
}

// Starts the process's peak (VmHWM) again from its resident set now.
void ResetPeakResidentOf(pid_t pid) {
  std::ofstream(absl::StrCat("/proc/", pid, "/clear_refs")) << "5";
}

// The methods that carry graphs read their request only once echod has
// reserved --max_request_bytes for it (server/gated_call.h). With 96 MiB
// for requests and 64 MiB requests, one is read at a time, so twelve
// concurrent 50 MB requests hold one message and eleven 64 KiB windows.
// Before the gate gRPC read every one first (peaks of 394-412 MiB for
// twelve at 256 MiB without its quota, 282-465 with it). Growth, not the
// peak, is what the requests take: with the CUDA plugin built, echod holds
// ~150 MiB more from the start.
TEST(EchodProcessTest, ConcurrentLargeRequestsStayWithinTheRequestMemory) {
  const std::string socket =
      absl::StrCat(::testing::TempDir(), "/echod_read_", ::getpid(), ".sock");
  // 192 MiB in all: 16 + 16 MiB of caches, 64 of echod's base, 96 for
  // requests.
  const pid_t echod =
      StartEchod(socket, {"--log_level=error", "--graph_cache_bytes=16777216",
                          "--answer_cache_bytes=16777216",
                          "--memory_budget_bytes=201326592"});
  ASSERT_GE(echod, 0);
  client::ClientOptions options;
  options.server = "unix://" + socket;
  client::PlannerClient client(options);
  ASSERT_TRUE(WaitFor(20, [&] { return client.Health("").ok(); }));
  const std::string garbage(50 << 20, '\xff');  // not a request
  ResetPeakResidentOf(echod);
  const int64_t before = ResidentBytesOf(echod, "VmRSS:");
  std::vector<std::future<grpc::StatusCode>> calls;
  for (int i = 0; i < 12; ++i) {
    calls.push_back(std::async(std::launch::async, [&] {
      // A channel each, as separate clients would.
      return testing::RawUnaryCall(options.server, "EstimateMemory", garbage,
                                   /*deadline_seconds=*/60)
          .error_code();
    }));
  }
  int refused = 0;
  for (auto& call : calls) {
    const grpc::StatusCode code = call.get();
    // Refused by gRPC's quota or echod's budget, or read and found not to
    // be a request: never served, never a crash.
    EXPECT_TRUE(code == grpc::StatusCode::RESOURCE_EXHAUSTED ||
                code == grpc::StatusCode::INVALID_ARGUMENT ||
                code == grpc::StatusCode::UNAVAILABLE)
        << code;
    refused += code == grpc::StatusCode::RESOURCE_EXHAUSTED;
  }
  const int64_t peak = ResidentBytesOf(echod, "VmHWM:");
  std::cout << "[ measured ] 12 concurrent 50 MB requests, 96 MiB for "
               "requests: echod's resident set "
            << (before >> 20) << " MiB before, peak " << (peak >> 20)
            << " MiB (grew " << ((peak - before) >> 20) << " MiB), " << refused
            << " RESOURCE_EXHAUSTED\n";
  // Within the memory for requests: one message being read (50 MB) and the
  // waiting streams' windows; two read at once would not fit.
  EXPECT_LT(peak - before, int64_t{96} << 20);
  // Still serving.
  EXPECT_TRUE(client.Health("").ok());
  ASSERT_EQ(::kill(echod, SIGTERM), 0);
  int status = 0;
  EXPECT_TRUE(
      WaitFor(15, [&] { return ::waitpid(echod, &status, WNOHANG) == echod; }));
}

TEST(EchodProcessTest, SigtermWithOptimalInFlightExitsWithinTheDrainTimeout) {
  ExpectSigtermExitsWithinTheDrainTimeout(LongOptimalRequest());
}

TEST(EchodProcessTest, SigtermWithAutoInFlightExitsWithinTheDrainTimeout) {
  v1::GenerateRecomputePlanRequest request;
  *request.mutable_graph() = testing::LongChain(100000);
  request.set_policy(v1::RECOMPUTE_POLICY_AUTO);
  request.mutable_device()->set_name("h100-80gb");
  ExpectSigtermExitsWithinTheDrainTimeout(request);
}

}  // namespace
}  // namespace echo
