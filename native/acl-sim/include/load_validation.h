// The validation run at load: runs a graph on zero-filled inputs under a work budget, and tells
// a failure that only the zeros cause (cannot be judged at load) from a defect of the model.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "graph.h"

#pragma GCC visibility push(hidden)
namespace sim {

// Ops charged per element a node reads or writes. On the development machine the GEMM kernels
// do ~4e10 multiply-adds/s and a ReduceSum reads ~2e8 elements/s: an element costs up to ~200
// multiply-adds, and the budget is meant to bound time.
constexpr double kElementOps = 128;

// Per slot: whether its values, or its shape, depend on the values of the graph inputs (as
// opposed to constants and input shapes). Derived from the op tables, once per model.
struct DataDeps {
  std::vector<bool> value, shape;
};
DataDeps dataDeps(const Graph &g);

// One load's budget, shared by all its validation runs (armed on the calling thread).
class WorkBudget {
 public:
  explicit WorkBudget(uint64_t ops);
  ~WorkBudget();
  WorkBudget(const WorkBudget &) = delete;
  WorkBudget &operator=(const WorkBudget &) = delete;
};

struct ValidationOutcome {
  // Per slot: not computed, because a node on its path failed in a way the zeros may cause.
  std::vector<bool> unknown;
  std::string unjudged;  // the first such failure, for messages
};

// Runs the graph on its bound inputs as the validation run. A failure that depends on input
// values skips the nodes downstream of it; any other failure, or the budget running out, throws.
ValidationOutcome runValidation(Graph &g, const DataDeps &deps);

}  // namespace sim
#pragma GCC visibility pop
