// What the kTensorOps table (ops_tensor.cc) shares with ops_reduce.cc, where its reductions live.
#pragma once
#include <cstdint>
#include <vector>

#include "ops.h"

#pragma GCC visibility push(hidden)
namespace sim {

// Axes for Reduce*/Squeeze/Unsqueeze: an attribute before `inputSince`, an input after (ops_tensor.cc).
std::vector<int64_t> axesOf(Node &n, Graph &g, int64_t inputSince, bool &given);

// The kernels of ReduceMean, ReduceSum and ReduceMax, and their load-time check (ops_reduce.cc).
void reduceMeanK(Node &n, Graph &g);
void reduceSumK(Node &n, Graph &g);
void reduceMaxK(Node &n, Graph &g);
void checkReduce(const NodeProto &n, int64_t opset);

}  // namespace sim
#pragma GCC visibility pop
