// The validation run at load: runs a graph on zero-filled inputs, and tells a failure that only
// the zeros cause (cannot be judged at load) from a defect of the model.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "graph.h"

#pragma GCC visibility push(hidden)
namespace sim {

// Per slot: whether its values, or its shape, depend on the values of the graph inputs (as
// opposed to constants and input shapes). Derived from the op tables, once per model.
struct DataDeps {
  std::vector<bool> value, shape;
};
DataDeps dataDeps(const Graph &g);

struct ValidationOutcome {
  // Per slot: not computed, because a node on its path failed in a way the zeros may cause.
  std::vector<bool> unknown;
  std::string unjudged;  // the first such failure, for messages
};

// Runs the graph on its bound inputs as the validation run. A failure that depends on input
// values skips the nodes downstream of it; any other failure throws.
ValidationOutcome runValidation(Graph &g, const DataDeps &deps);

}  // namespace sim
#pragma GCC visibility pop
