// A graph whose OPTIMAL model is too big for the solver, for the planner's
// and the server's tests of the refusal.
#ifndef ECHO_TESTS_UNIT_TOO_BIG_GRAPH_H_
#define ECHO_TESTS_UNIT_TOO_BIG_GRAPH_H_

#include <string>

#include "absl/strings/str_cat.h"

namespace echo::testing {

// In the planner's text format: a 3000-op chain whose backward reads every
// forward output, ~2.25M R columns for OPTIMAL (over the default 250,000
// nonzeros). With `recomputable` false no op can be re-run:
// no R columns, and ~1.1M S columns (x held into a later stage) instead.
inline std::string TooBigForOptimalText(bool recomputable = true) {
  constexpr int kLayers = 1500;
  const char* flag = recomputable ? "" : " norecompute";
  std::string text = "tensor x 10 input\n";
  std::string previous = "x";
  for (int i = 0; i < kLayers; ++i) {
    absl::StrAppend(&text, "op f", i, " fwd elementwise ", previous, " -> a", i,
                    ":100 cost=1", flag, "\n");
    previous = absl::StrCat("a", i);
  }
  std::string grad = previous;
  for (int i = kLayers - 1; i >= 0; --i) {
    absl::StrAppend(&text, "op b", i, " bwd elementwise ", grad, " a", i,
                    " -> g", i, ":100 cost=1", flag, "\n");
    grad = absl::StrCat("g", i);
  }
  return text;
}

// A chain of `ops` ops none of which can be re-run, each output read only by
// the next op: an OPTIMAL model of O(ops) nonzeros, whose stage-by-op tables
// would take O(ops^2) memory if they were dense.
inline std::string LongFixedChainText(int ops) {
  std::string text = "tensor x 10 input\n";
  std::string previous = "x";
  for (int i = 0; i < ops; ++i) {
    absl::StrAppend(&text, "op f", i, " fwd elementwise ", previous, " -> a", i,
                    ":100 cost=1 norecompute\n");
    previous = absl::StrCat("a", i);
  }
  absl::StrAppend(&text, "output ", previous, "\n");
  return text;
}

}  // namespace echo::testing

#endif  // ECHO_TESTS_UNIT_TOO_BIG_GRAPH_H_
