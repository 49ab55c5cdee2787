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

// The default budget of one load: max(kWorkFloorOps, kOpsPerWeightByte x weight bytes x
// (max batch + 2)); the + 2 are the two runs at batch 1 of a dynamic model. Real models do work
// in proportion to their weights: counted this way, ResNet-50 does ~110 ops per weight byte per
// sample and MobileNetV2 ~260 (activation traffic), so 2048 leaves room for heavier ones. A
// hostile model does work far out of proportion to its size, and gets the floor (about 1 s of
// work on the development machine), or must carry (and reserve device memory for) weights in
// proportion to the work it buys (~0.6 MB per second of work at the default gears).
constexpr double kWorkFloorOps = 34359738368.0;  // 2^35
constexpr double kOpsPerWeightByte = 2048;
uint64_t defaultWorkBudget(size_t weightBytes, uint64_t maxBatch);

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
