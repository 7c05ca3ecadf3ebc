// Helpers shared by the unit and integration tests. A bad absl::Status or
// StatusOr fails the current test (ASSERT_OK, ASSERT_OK_AND_ASSIGN) instead
// of aborting the test binary on a dereference.
#ifndef ECHO_TESTS_UNIT_TEST_UTIL_H_
#define ECHO_TESTS_UNIT_TEST_UTIL_H_

#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "gtest/gtest.h"
#include "planner/checkmate_import.h"
#include "planner/device_catalog.h"
#include "planner/graph.h"
#include "planner/memory_simulator.h"
#include "planner/text_format.h"

// Sanitizer builds run slower: tests multiply the solver time limits they
// need to reach an optimum by this (cmake/sanitizers.cmake).
#ifndef ECHO_TEST_TIME_SCALE
#define ECHO_TEST_TIME_SCALE 1
#endif

namespace echo::testing {

inline constexpr double kTimeScale = ECHO_TEST_TIME_SCALE;

inline const absl::Status& StatusOf(const absl::Status& status) {
  return status;
}
template <typename T>
const absl::Status& StatusOf(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}

}  // namespace echo::testing

#define ECHO_TEST_CONCAT_INNER_(a, b) a##b
#define ECHO_TEST_CONCAT_(a, b) ECHO_TEST_CONCAT_INNER_(a, b)

#define EXPECT_OK(expr)                                            \
  do {                                                             \
    const auto& echo_test_result_ = (expr);                        \
    EXPECT_TRUE(::echo::testing::StatusOf(echo_test_result_).ok()) \
        << ::echo::testing::StatusOf(echo_test_result_);           \
  } while (0)
#define ASSERT_OK(expr)                                            \
  do {                                                             \
    const auto& echo_test_result_ = (expr);                        \
    ASSERT_TRUE(::echo::testing::StatusOf(echo_test_result_).ok()) \
        << ::echo::testing::StatusOf(echo_test_result_);           \
  } while (0)

// Fails the test (returning from it) when the StatusOr is an error, else
// moves its value into lhs.
#define ASSERT_OK_AND_ASSIGN(lhs, expr) \
  ECHO_ASSERT_OK_AND_ASSIGN_IMPL_(      \
      ECHO_TEST_CONCAT_(echo_test_statusor_, __LINE__), lhs, expr)
#define ECHO_ASSERT_OK_AND_ASSIGN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                    \
  ASSERT_TRUE(statusor.ok()) << statusor.status();           \
  lhs = *std::move(statusor)

namespace echo::testing {

inline std::string ReadTestFile(const std::string& relative_path) {
  const std::string path =
      std::string(ECHO_TEST_DATA_DIR) + "/" + relative_path;
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// The value, or (after failing the current test) a value-initialized T:
// a bad fixture fails its test instead of aborting the binary.
template <typename T>
T ValueOrFail(absl::StatusOr<T> status_or) {
  if (!status_or.ok()) {
    ADD_FAILURE() << status_or.status();
    return T{};
  }
  return *std::move(status_or);
}

// A device of the catalog; an unknown name fails the test (and returns an
// empty spec) instead of aborting the binary.
inline planner::DeviceSpec CatalogDevice(absl::string_view name) {
  return ValueOrFail(planner::FindCatalogDevice(name));
}

inline planner::Graph LoadCheckmate(const std::string& name) {
  return ValueOrFail(planner::ImportCheckmateJson(
      ReadTestFile("checkmate/" + name + ".json")));
}

inline planner::Graph ParseOrFail(absl::string_view text) {
  return ValueOrFail(planner::ParseTextGraph(text));
}

// Each op's relative_cost (`cost=` in the text format), as op costs.
// "f1 f2 (f2) b3" style rendering: recomputations in parentheses.
inline std::string Render(const planner::Graph& graph,
                          const planner::Schedule& schedule) {
  std::string out;
  for (const planner::Execution& e : schedule) {
    if (!out.empty()) out += " ";
    out += e.recompute ? "(" + graph.op(e.op).id + ")" : graph.op(e.op).id;
  }
  return out;
}

// The ids of `tensors`, in order.
inline std::vector<std::string> TensorIds(
    const planner::Graph& graph,
    absl::Span<const planner::TensorIndex> tensors) {
  std::vector<std::string> ids;
  for (planner::TensorIndex t : tensors) ids.push_back(graph.tensor(t).id);
  return ids;
}

inline std::vector<double> RelativeCosts(const planner::Graph& graph) {
  std::vector<double> costs;
  costs.reserve(graph.num_ops());
  for (const planner::Op& op : graph.ops()) costs.push_back(op.relative_cost);
  return costs;
}

// A graph with a batch dimension (batch 2); its peak at batch b is
// max(1000 + 500b at b2, 2000 + 100b at upd) (w, a, b, g live at b2; w, g,
// w2 at upd).
inline constexpr char kTinyBatchGraph[] = R"(
graph tiny
batch 2
tensor w 1000 parameter
tensor x 100*B input
op f1 fwd elementwise x w -> a:200*B cost=1
op f2 fwd elementwise a -> b:200*B cost=1
op b2 bwd elementwise b a -> g:100*B cost=1
op upd opt elementwise w g -> w2:1000 cost=1
output w2
)";

// Two gemm + elementwise layers; the backward of each gemm reads its input,
// the elementwise backward reads the op's input. Costs: gemm 10, others 1
// (baseline 45). Plain peak 2201 bytes, at b4.
inline constexpr char kTwoLayerChain[] = R"(
  tensor x 10 input
  op f1 fwd gemm x -> a:100 cost=10
  op f2 fwd elementwise a -> b:1000 cost=1
  op f3 fwd gemm b -> c:100 cost=10
  op f4 fwd elementwise c -> d:1000 cost=1
  op loss fwd reduction d -> l:1 cost=1
  op b4 bwd elementwise l d -> gd:100 cost=1
  op b3 bwd gemm gd b -> gc:100 cost=10
  op b2 bwd elementwise gc a -> gb:100 cost=1
  op b1 bwd gemm gb -> ga:10 cost=10
)";

}  // namespace echo::testing

#endif  // ECHO_TESTS_UNIT_TEST_UTIL_H_
