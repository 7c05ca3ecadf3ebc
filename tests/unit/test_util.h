// Helpers shared by the unit tests.
#ifndef ECHO_TESTS_UNIT_TEST_UTIL_H_
#define ECHO_TESTS_UNIT_TEST_UTIL_H_

#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "planner/checkmate_import.h"
#include "planner/graph.h"
#include "planner/text_format.h"

namespace echo::testing {

inline std::string ReadTestFile(const std::string& relative_path) {
  const std::string path = std::string(ECHO_TEST_DATA_DIR) + "/" + relative_path;
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

inline planner::Graph LoadCheckmate(const std::string& name) {
  absl::StatusOr<planner::Graph> graph = planner::ImportCheckmateJson(
      ReadTestFile("checkmate/" + name + ".json"));
  EXPECT_TRUE(graph.ok()) << graph.status();
  return *std::move(graph);
}

inline planner::Graph ParseOrDie(absl::string_view text) {
  absl::StatusOr<planner::Graph> graph = planner::ParseTextGraph(text);
  EXPECT_TRUE(graph.ok()) << graph.status();
  return *std::move(graph);
}

}  // namespace echo::testing

#endif  // ECHO_TESTS_UNIT_TEST_UTIL_H_
