// Helpers shared by the unit and integration tests. A bad absl::Status or
// StatusOr fails the current test (ASSERT_OK, ASSERT_OK_AND_ASSIGN) instead
// of aborting the test binary on a dereference.
#ifndef ECHO_TESTS_UNIT_TEST_UTIL_H_
#define ECHO_TESTS_UNIT_TEST_UTIL_H_

#include <fstream>
#include <sstream>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "planner/checkmate_import.h"
#include "planner/graph.h"
#include "planner/text_format.h"

namespace echo::testing {

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

#define EXPECT_OK(expr)                                              \
  do {                                                               \
    const auto& echo_test_result_ = (expr);                          \
    EXPECT_TRUE(::echo::testing::StatusOf(echo_test_result_).ok())   \
        << ::echo::testing::StatusOf(echo_test_result_);             \
  } while (0)
#define ASSERT_OK(expr)                                              \
  do {                                                               \
    const auto& echo_test_result_ = (expr);                          \
    ASSERT_TRUE(::echo::testing::StatusOf(echo_test_result_).ok())   \
        << ::echo::testing::StatusOf(echo_test_result_);             \
  } while (0)

// Fails the test (returning from it) when the StatusOr is an error, else
// moves its value into lhs.
#define ASSERT_OK_AND_ASSIGN(lhs, expr)                                 \
  ECHO_ASSERT_OK_AND_ASSIGN_IMPL_(                                      \
      ECHO_TEST_CONCAT_(echo_test_statusor_, __LINE__), lhs, expr)
#define ECHO_ASSERT_OK_AND_ASSIGN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                    \
  ASSERT_TRUE(statusor.ok()) << statusor.status();           \
  lhs = *std::move(statusor)

namespace echo::testing {

inline std::string ReadTestFile(const std::string& relative_path) {
  const std::string path = std::string(ECHO_TEST_DATA_DIR) + "/" + relative_path;
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

inline planner::Graph LoadCheckmate(const std::string& name) {
  return ValueOrFail(planner::ImportCheckmateJson(
      ReadTestFile("checkmate/" + name + ".json")));
}

inline planner::Graph ParseOrFail(absl::string_view text) {
  return ValueOrFail(planner::ParseTextGraph(text));
}

}  // namespace echo::testing

#endif  // ECHO_TESTS_UNIT_TEST_UTIL_H_
