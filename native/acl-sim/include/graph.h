// Executable graph built from an ONNX ModelProto: value slots, topologically ordered nodes,
// kernels resolved at load. Shapes are inferred at run time from the actual inputs.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "onnx_proto.h"
#include "sim_common.h"

#pragma GCC visibility push(hidden)
namespace sim {

// Element count of a shape; throws SimError(code) if a dim is negative or the count exceeds
// 2^34 elements, so later size arithmetic cannot wrap.
int64_t checkedNumel(const std::vector<int64_t> &shape, int code);

// Largest single tensor the calling thread may allocate (the device capacity while a model
// loads or runs), so a hostile or oversized graph fails instead of exhausting host memory.
void setTensorByteLimit(size_t bytes);

// Set on the calling thread for the validation run at load, which feeds all-zero inputs: a kernel
// whose failure depends only on input values (integer division by zero) yields a value instead,
// so a model is not refused for what the zeros would do at run time.
void setValidationRun(bool on);
bool validationRun();

// Counts ops (multiply-adds, window taps) against the validation run's work budget; a no-op
// outside that run. Kernels call it before heavy work so a hostile shape is refused before it
// runs (load_validation.cc).
void chargeWork(double ops);

struct Tensor {
  int dtype = ONNX_FLOAT;
  std::vector<int64_t> shape;
  void *data = nullptr;  // points into buf, at a constant, at caller memory, or at another slot (view)
  AlignedBuf buf;
  bool isConst = false;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  size_t bytes() const { return size_t(numel()) * onnxElemSize(dtype); }
  int rank() const { return int(shape.size()); }
  float *f() const { return static_cast<float *>(data); }
  template <class T> T *as() const { return static_cast<T *>(data); }
  // Gives this slot its own storage of the given type and shape (reusing capacity).
  void alloc(int dt, const std::vector<int64_t> &s);
  // Makes this slot an alias of src's bytes with another shape (Reshape, Flatten, ...).
  void view(const Tensor &src, const std::vector<int64_t> &s);
};

struct Graph;
struct Node;
using KernelFn = void (*)(Node &, Graph &);
using CheckFn = void (*)(const NodeProto &, int64_t opset);

struct OpDef {
  const char *name;
  int minIn, maxIn, minOut, maxOut;
  CheckFn check;  // validates attributes at load (throws SimError)
  KernelFn run;
  // Bit k set: the values of input k (not only its shape) decide the output shape (shapeArgs),
  // or can make the op fail (checkedArgs). The validation run at load uses them to tell a failure
  // caused by its zero-filled inputs from a defect of the model (load_validation.cc).
  uint32_t shapeArgs = 0;
  uint32_t checkedArgs = 0;
};
const OpDef *findOp(const std::string &opType);
std::string supportedOps();

struct Node {
  const NodeProto *proto = nullptr;
  const OpDef *op = nullptr;
  std::vector<int> in, out;  // slot ids, -1 for an omitted optional input
  std::shared_ptr<void> state;
  double totalMs = 0;  // accumulated only with NPU_FLEET_SIM_OP_TIMES
  uint64_t calls = 0;
  std::string label() const;
};

struct Graph {
  ModelProto proto;
  std::vector<Tensor> slots;
  std::vector<std::string> slotNames;
  std::vector<Node> nodes;  // topological order
  std::vector<int> inputSlots, outputSlots;
  size_t weightBytes = 0;
  size_t stateBytes = 0;  // kernel-private data such as pre-packed weights

  Tensor &in(Node &n, int i) { return slots[size_t(n.in[size_t(i)])]; }
  Tensor *optIn(Node &n, int i) {
    if (i >= int(n.in.size()) || n.in[size_t(i)] < 0) return nullptr;
    return &slots[size_t(n.in[size_t(i)])];
  }
  Tensor &out(Node &n, int i) { return slots[size_t(n.out[size_t(i)])]; }
  int64_t opset() const { return proto.opset; }
  // Runs all nodes; throws SimError(ACL_ERROR_RT_MODEL_EXECUTE) naming the failing node.
  void run();
  // Bytes held by intermediate value storage (the model's "workspace").
  size_t workspaceBytes() const;
  // With NPU_FLEET_SIM_OP_TIMES set, prints per-node time totals to stderr.
  ~Graph();
};

// Builds and validates the graph (supported ops, attributes, topology). Throws SimError.
std::unique_ptr<Graph> buildGraph(ModelProto &&m);

// Attribute helpers shared by the kernels.
int64_t attrInt(const NodeProto &n, const char *name, int64_t def);
float attrFloat(const NodeProto &n, const char *name, float def);
std::string attrStr(const NodeProto &n, const char *name, const std::string &def);
std::vector<int64_t> attrInts(const NodeProto &n, const char *name);
bool hasAttr(const NodeProto &n, const char *name);

}  // namespace sim
#pragma GCC visibility pop
