// A graph whose OPTIMAL model is too big for the solver, for the planner's
// and the server's tests of the refusal.
#ifndef ECHO_TESTS_UNIT_TOO_BIG_GRAPH_H_
#define ECHO_TESTS_UNIT_TOO_BIG_GRAPH_H_

#include <string>

#include "absl/strings/str_cat.h"

namespace echo::testing {

// In the planner's text format: a 3000-op chain whose backward reads every
// forward output, ~2.25M R columns for OPTIMAL (over the default 250,000
// nonzeros).
inline std::string TooBigForOptimalText() {
  constexpr int kLayers = 1500;
  std::string text = "tensor x 10 input\n";
  std::string previous = "x";
  for (int i = 0; i < kLayers; ++i) {
    absl::StrAppend(&text, "op f", i, " fwd elementwise ", previous, " -> a", i,
                    ":100 cost=1\n");
    previous = absl::StrCat("a", i);
  }
  std::string grad = previous;
  for (int i = kLayers - 1; i >= 0; --i) {
    absl::StrAppend(&text, "op b", i, " bwd elementwise ", grad, " a", i,
                    " -> g", i, ":100 cost=1\n");
    grad = absl::StrCat("g", i);
  }
  return text;
}

}  // namespace echo::testing

#endif  // ECHO_TESTS_UNIT_TOO_BIG_GRAPH_H_
