// The memory budget (memory_budget.h): the working-set estimate from wire
// bytes, reservations, and concurrent big requests against an in-process
// echod whose RSS must stay under its budget (issue 23, item 4).
#include "server/memory_budget.h"

#include <future>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "in_process_echod.h"
#include "tests/unit/test_util.h"

namespace echo::server {
namespace {

using ::testing::HasSubstr;

grpc::ByteBuffer Wire(const google::protobuf::Message& message) {
  grpc::Slice slice(message.SerializeAsString());
  return grpc::ByteBuffer(&slice, 1);
}

// A chain of `ops` ops with ids as long as a transformer's.
v1::EstimateMemoryRequest ChainRequest(int ops) {
  v1::EstimateMemoryRequest request;
  v1::Graph& graph = *request.mutable_graph();
  graph.set_name("chain");
  std::string previous = "x";
  v1::Tensor& input = *graph.add_tensors();
  input.set_id(previous);
  input.set_size_bytes(4096);
  for (int i = 0; i < ops; ++i) {
    v1::Tensor& tensor = *graph.add_tensors();
    tensor.set_id(absl::StrCat("model.layers.", i, ".mlp.act_fn.out"));
    tensor.set_size_bytes(4096);
    v1::Op& op = *graph.add_ops();
    op.set_id(absl::StrCat("model.layers.", i, ".mlp.act_fn"));
    op.set_op_type("aten::relu");
    op.set_relative_cost(1);
    op.add_input_ids(previous);
    op.add_output_ids(tensor.id());
    previous = tensor.id();
  }
  return request;
}

TEST(WorkingSetTest, CountsEveryFieldOccurrenceAndByte) {
  v1::EstimateMemoryRequest request;
  v1::Graph& graph = *request.mutable_graph();  // 1 field
  graph.set_name("g");                          // 1
  for (const char* id : {"a", "b"}) {           // 2 tensors, 2 fields each
    v1::Tensor& tensor = *graph.add_tensors();
    tensor.set_id(id);
    tensor.set_size_bytes(16);
  }
  v1::Op& op = *graph.add_ops();  // 1 op, 3 fields
  op.set_id("f");
  op.add_input_ids("a");
  op.add_output_ids("b");
  const int64_t fields = 1 + 1 + 2 * 3 + 1 + 3;
  EXPECT_EQ(EstimateWorkingSetBytes(Wire(request),
                                    *v1::EstimateMemoryRequest::descriptor()),
            kWorkingSetBaseBytes +
                kWorkingSetBytesPerWireByte *
                    static_cast<int64_t>(request.ByteSizeLong()) +
                kWorkingSetBytesPerField * fields);
  // Garbage is counted as far as it parses: never more than its fields.
  grpc::Slice garbage(std::string(1000, '\xff'));
  EXPECT_LE(EstimateWorkingSetBytes(grpc::ByteBuffer(&garbage, 1),
                                    *v1::EstimateMemoryRequest::descriptor()),
            kWorkingSetBaseBytes + kWorkingSetBytesPerWireByte * 1000 +
                kWorkingSetBytesPerField);
}

TEST(MemoryBudgetTest, ReservesRefusesAndGivesBack) {
  MemoryBudget budget(1000);
  absl::StatusOr<MemoryBudget::Reservation> a = budget.Reserve(600);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(budget.in_use_bytes(), 600);
  const absl::StatusOr<MemoryBudget::Reservation> b = budget.Reserve(500);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(b.status().message()),
              HasSubstr("memory budget is taken"));
  const absl::StatusOr<MemoryBudget::Reservation> huge = budget.Reserve(2000);
  EXPECT_THAT(std::string(huge.status().message()),
              HasSubstr("more than echod's whole budget"));
  {
    MemoryBudget::Reservation moved = std::move(*a);
    EXPECT_EQ(budget.in_use_bytes(), 600);
  }
  EXPECT_EQ(budget.in_use_bytes(), 0);
  EXPECT_TRUE(budget.Reserve(1000).ok());  // and given back at once
  EXPECT_EQ(budget.in_use_bytes(), 0);
  MemoryBudget unbounded(0);
  EXPECT_TRUE(unbounded.Reserve(int64_t{1} << 50).ok());
}

// Calls that wait for memory (the generic calls' reads, gated_call.h) get
// it in the order they asked, each once releases make room.
TEST(MemoryBudgetTest, WaitersAreGrantedFirstComeFirstServed) {
  MemoryBudget budget(1000);
  std::vector<std::pair<int64_t, int>> observed;  // what the metrics see
  budget.SetObserver([&observed](int64_t in_use, int waiting) {
    observed.emplace_back(in_use, waiting);
  });
  absl::StatusOr<MemoryBudget::Reservation> held = budget.Reserve(800);
  ASSERT_TRUE(held.ok());
  std::vector<std::string> order;
  std::vector<MemoryBudget::Reservation> granted;
  auto keep = [&](const char* name) {
    return [&, name](MemoryBudget::Reservation reservation) {
      order.push_back(name);
      granted.push_back(std::move(reservation));
    };
  };
  budget.Wait(500, keep("big"));
  // Fits now, but waits behind the big one: small calls do not starve it.
  budget.Wait(100, keep("small"));
  EXPECT_EQ(budget.waiting(), 2);
  EXPECT_TRUE(order.empty());
  held->Release();
  EXPECT_THAT(order, ::testing::ElementsAre("big", "small"));
  EXPECT_EQ(budget.in_use_bytes(), 600);
  EXPECT_EQ(budget.waiting(), 0);
  // Reserved, two waiting, released, both granted.
  EXPECT_THAT(observed, ::testing::ElementsAre(
                            ::testing::Pair(800, 0), ::testing::Pair(800, 1),
                            ::testing::Pair(800, 2), ::testing::Pair(0, 2),
                            ::testing::Pair(600, 0)));
  // What fits behind no one is granted at once, on the caller's thread.
  budget.Wait(400, keep("now"));
  EXPECT_EQ(order.back(), "now");
  EXPECT_EQ(budget.in_use_bytes(), 1000);
  // More than the whole budget waits for all of it, not for ever.
  granted.clear();
  budget.Wait(5000, keep("huge"));
  EXPECT_EQ(order.back(), "huge");
  EXPECT_EQ(granted.back().bytes(), 1000);
  // Unbounded: granted at once.
  MemoryBudget unbounded(0);
  bool ran = false;
  unbounded.Wait(int64_t{1} << 50,
                 [&](MemoryBudget::Reservation) { ran = true; });
  EXPECT_TRUE(ran);
}

TEST(MemoryBudgetTest, ACancelledWaitIsNeverGranted) {
  MemoryBudget budget(1000);
  absl::StatusOr<MemoryBudget::Reservation> held = budget.Reserve(1000);
  ASSERT_TRUE(held.ok());
  int runs = 0;
  const uint64_t ticket =
      budget.Wait(300, [&](MemoryBudget::Reservation) { ++runs; });
  EXPECT_TRUE(budget.CancelWait(ticket));
  EXPECT_FALSE(budget.CancelWait(ticket));  // once only
  held->Release();
  EXPECT_EQ(runs, 0);
  EXPECT_EQ(budget.in_use_bytes(), 0);
  // Cancelling the first waiter lets the ones behind it that fit go.
  absl::StatusOr<MemoryBudget::Reservation> most = budget.Reserve(600);
  ASSERT_TRUE(most.ok());
  const uint64_t big = budget.Wait(500, [&](MemoryBudget::Reservation) {});
  bool small_granted = false;
  budget.Wait(300, [&](MemoryBudget::Reservation) { small_granted = true; });
  EXPECT_FALSE(small_granted);  // behind the big one
  EXPECT_TRUE(budget.CancelWait(big));
  EXPECT_TRUE(small_granted);
  most->Release();
  // A granted ticket cannot be cancelled: its holder owns the bytes.
  const uint64_t granted =
      budget.Wait(300, [&](MemoryBudget::Reservation) { ++runs; });
  EXPECT_EQ(runs, 1);
  EXPECT_FALSE(budget.CancelWait(granted));
}

// A read's reservation becomes the request's working set once its bytes
// are known: smaller gives memory back (and wakes waiters), bigger needs
// room.
TEST(MemoryBudgetTest, ResizeShrinksOrGrowsWithinTheBudget) {
  MemoryBudget budget(1000);
  absl::StatusOr<MemoryBudget::Reservation> read = budget.Reserve(600);
  ASSERT_TRUE(read.ok());
  bool woken = false;
  budget.Wait(700, [&](MemoryBudget::Reservation) { woken = true; });
  EXPECT_FALSE(woken);
  ASSERT_TRUE(read->Resize(200).ok());
  EXPECT_TRUE(woken);  // 200 + 700 fit
  EXPECT_EQ(read->bytes(), 200);
  EXPECT_EQ(budget.in_use_bytes(), 200);  // the waiter's went with it
  ASSERT_TRUE(read->Resize(900).ok());
  const absl::Status too_big = read->Resize(1200);
  EXPECT_THAT(std::string(too_big.message()),
              HasSubstr("more than echod's whole budget"));
  absl::StatusOr<MemoryBudget::Reservation> other = budget.Reserve(100);
  ASSERT_TRUE(other.ok());
  const absl::Status taken = read->Resize(950);
  EXPECT_THAT(std::string(taken.message()),
              HasSubstr("memory budget is taken"));
  EXPECT_EQ(read->bytes(), 900);  // unchanged by a refusal
  EXPECT_EQ(budget.in_use_bytes(), 1000);
}

// Eight concurrent ~10 MB estimates (each reserving ~200 MB) against 450
// MiB for requests: some are refused at once, the rest answered, and the
// process's high-water mark grows by less than the budget. Without it all
// eight ran (each took ~150 MB).
TEST(MemoryBudgetTest, ConcurrentBigRequestsStayUnderTheBudget) {
  PlannerServiceOptions options;
  options.worker_threads = 2;
  options.graph_cache_bytes = 0;
  options.answer_cache_bytes = 0;
  constexpr int64_t kForRequests = int64_t{450} << 20;
  options.memory_budget_bytes = kServerBaseBytes + kForRequests;
  testing::Echod echod(options);
  EXPECT_EQ(
      testing::ValueOrFail(echod.Client().GetNodeInfo()).request_memory_bytes(),
      kForRequests);
  const v1::EstimateMemoryRequest request = ChainRequest(60000);
  const int64_t estimate = EstimateWorkingSetBytes(
      Wire(request), *v1::EstimateMemoryRequest::descriptor());
  ASSERT_GT(estimate * 2, kForRequests / 2);
  ASSERT_LT(estimate, kForRequests);
  const int64_t before = testing::PeakResidentBytes();
  std::vector<std::future<absl::Status>> calls;
  for (int i = 0; i < 8; ++i) {
    calls.push_back(std::async(std::launch::async, [&] {
      return echod.Client(120).EstimateMemory(request).status();
    }));
  }
  int answered = 0;
  int refused = 0;
  for (auto& call : calls) {
    const absl::Status status = call.get();
    if (status.ok()) {
      ++answered;
    } else {
      EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
      EXPECT_THAT(std::string(status.message()),
                  HasSubstr("memory budget is taken"));
      ++refused;
    }
  }
  const int64_t grew = testing::PeakResidentBytes() - before;
  std::cout << "[ measured ] 8 concurrent " << (request.ByteSizeLong() >> 20)
            << " MiB estimates, " << (estimate >> 20)
            << " MiB reserved each: " << answered << " answered, " << refused
            << " refused; high-water mark grew " << (grew >> 20)
            << " MiB (budget for requests " << (kForRequests >> 20)
            << " MiB)\n";
  EXPECT_GE(answered, 1);
  EXPECT_GE(refused, 1);
  EXPECT_LT(grew, kForRequests);
  EXPECT_EQ(echod.service().memory_budget().in_use_bytes(), 0);
  // A graph bigger than the whole budget can never be served: said so.
  const absl::Status too_big =
      echod.Client(120).EstimateMemory(ChainRequest(150000)).status();
  EXPECT_THAT(std::string(too_big.message()),
              HasSubstr("more than echod's whole budget"));
  // And echod keeps serving.
  EXPECT_TRUE(echod.Client().EstimateMemory(ChainRequest(10)).ok());
}

}  // namespace
}  // namespace echo::server
