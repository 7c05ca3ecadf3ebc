// A long chain of elementwise ops and its backward, for tests that need a
// plan that runs for seconds (AUTO on 100k steps).
#ifndef ECHO_TESTS_INTEGRATION_LONG_CHAIN_H_
#define ECHO_TESTS_INTEGRATION_LONG_CHAIN_H_

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "echo/v1/graph.pb.h"

namespace echo::testing {

// A chain of `length` forward ops, each reading the one before, and its
// backward: AUTO searches it for seconds.
inline v1::Graph LongChain(int length) {
  v1::Graph graph;
  graph.set_name("chain");
  auto tensor = [&](const std::string& id) {
    v1::Tensor* t = graph.add_tensors();
    t->set_id(id);
    t->set_dtype(v1::DTYPE_FLOAT32);
    t->add_shape(256);
    t->add_shape(256);
  };
  auto op = [&](const std::string& id, v1::Phase phase,
                std::vector<std::string> inputs, const std::string& output) {
    v1::Op* o = graph.add_ops();
    o->set_id(id);
    o->set_op_type("aten::tanh");
    o->set_op_class(v1::OP_CLASS_ELEMENTWISE);
    o->set_phase(phase);
    for (const std::string& in : inputs) o->add_input_ids(in);
    o->add_output_ids(output);
  };
  tensor("x0");
  for (int i = 1; i <= length; ++i) {
    tensor(absl::StrCat("x", i));
    op(absl::StrCat("f", i), v1::PHASE_FORWARD, {absl::StrCat("x", i - 1)},
       absl::StrCat("x", i));
  }
  tensor(absl::StrCat("g", length));
  for (int i = length; i >= 1; --i) {
    tensor(absl::StrCat("g", i - 1));
    op(absl::StrCat("b", i), v1::PHASE_BACKWARD,
       {absl::StrCat("g", i), absl::StrCat("x", i - 1)},
       absl::StrCat("g", i - 1));
  }
  graph.mutable_tensors(graph.tensors_size() - 1)->set_is_output(true);
  return graph;
}

}  // namespace echo::testing

#endif  // ECHO_TESTS_INTEGRATION_LONG_CHAIN_H_
