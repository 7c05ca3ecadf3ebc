// Shared by the fuzz targets: what every decoded graph goes through, and a
// crash that libFuzzer reports when a property (not just memory safety)
// fails.
#ifndef ECHO_TESTS_FUZZ_FUZZ_UTIL_H_
#define ECHO_TESTS_FUZZ_FUZZ_UTIL_H_

#include <cstdio>
#include <cstdlib>

#include "absl/status/statusor.h"
#include "adapter/graph_convert.h"
#include "planner/graph.h"
#include "planner/memory_simulator.h"

namespace echo::fuzz {

// abort() so that libFuzzer saves the input as a crash.
[[noreturn]] inline void Fail(const char* what) {
  std::fprintf(stderr, "fuzz property failed: %s\n", what);
  std::abort();
}

#define ECHO_FUZZ_CHECK(cond) \
  ((cond) ? (void)0 : ::echo::fuzz::Fail(#cond " (" __FILE__ ")"))

// An importer's two routes must agree: the Graph it builds itself (what the
// planner's tests use) and its declarations sent as a proto and validated
// by the adapter (what echoctl sends and echod builds). Then simulates it.
inline void CheckImported(const absl::StatusOr<planner::Graph>& direct,
                          const absl::StatusOr<planner::GraphBuilder>& specs) {
  ECHO_FUZZ_CHECK(direct.ok() <= specs.ok());
  if (!specs.ok()) return;
  absl::StatusOr<v1::Graph> proto = adapter::GraphSpecsToProto(*specs);
  absl::StatusOr<planner::Graph> via_proto =
      proto.ok() ? adapter::GraphFromProto(*proto)
                 : absl::StatusOr<planner::Graph>(proto.status());
  ECHO_FUZZ_CHECK(direct.ok() == via_proto.ok());
  if (!direct.ok()) return;
  ECHO_FUZZ_CHECK(direct->num_ops() == via_proto->num_ops());
  ECHO_FUZZ_CHECK(direct->num_tensors() == via_proto->num_tensors());
  const planner::SimulationResult a = planner::SimulatePlain(*direct);
  const planner::SimulationResult b = planner::SimulatePlain(*via_proto);
  ECHO_FUZZ_CHECK(a.peak_bytes == b.peak_bytes);
}

}  // namespace echo::fuzz

#endif  // ECHO_TESTS_FUZZ_FUZZ_UTIL_H_
