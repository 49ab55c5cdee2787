// Graph construction (validation, constant folding of Constant nodes, topological order)
// and execution.
#include "graph.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <new>
#include <queue>

#include "ops.h"

namespace sim {

int64_t checkedNumel(const std::vector<int64_t> &shape, int code) {
  constexpr int64_t kMax = int64_t(1) << 34;
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) fail(code, "shape " + shapeStr(shape) + " has a negative dim");
    if (d != 0 && n > kMax / d) fail(code, "shape " + shapeStr(shape) + " is too large (over 2^34 elements)");
    n *= d;
  }
  return n;
}

namespace {
thread_local size_t tl_tensorByteLimit = SIZE_MAX;
thread_local bool tl_validationRun = false;
}
void setTensorByteLimit(size_t bytes) { tl_tensorByteLimit = bytes; }
void setValidationRun(bool on) { tl_validationRun = on; }
bool validationRun() { return tl_validationRun; }

void Tensor::alloc(int dt, const std::vector<int64_t> &s) {
  const int64_t numel = checkedNumel(s, ACL_ERROR_RT_MODEL_EXECUTE);
  const size_t n = size_t(numel) * onnxElemSize(dt);
  if (n > tl_tensorByteLimit) {
    fail(int(ACL_ERROR_GE_MEMORY_ALLOCATION), "a " + std::string(onnxTypeName(dt)) + " tensor of shape " + shapeStr(s) + " (" +
                                         std::to_string(n) + " bytes) exceeds the device memory");
  }
  dtype = dt;
  shape = s;
  data = buf.ensure(n ? n : 1);
}

void Tensor::view(const Tensor &src, const std::vector<int64_t> &s) {
  // Same bound as alloc, so no view shape can claim more elements than numel() can count.
  checkedNumel(s, ACL_ERROR_RT_MODEL_EXECUTE);
  dtype = src.dtype;
  shape = s;
  data = src.data;
}

[[noreturn]] void execFail(const std::string &msg) { fail(ACL_ERROR_RT_MODEL_EXECUTE, msg); }
[[noreturn]] void loadFail(const std::string &msg) { fail(ACL_ERROR_PARSE_MODEL, msg); }

std::string shapeStr(const std::vector<int64_t> &s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? "," : "") + std::to_string(s[i]);
  return r + "]";
}

int64_t normAxis(int64_t axis, int64_t r, const char *what, bool inclusive) {
  const int64_t hi = inclusive ? r : r - 1;
  if (axis < -r || axis > hi) {
    execFail(std::string(what) + " " + std::to_string(axis) + " is out of range for rank " + std::to_string(r));
  }
  return axis < 0 ? axis + r : axis;
}

std::vector<int64_t> readInts(const Tensor &t, const char *what) {
  std::vector<int64_t> v(size_t(t.numel()));
  if (t.dtype == ONNX_INT64) {
    if (!v.empty()) std::memcpy(v.data(), t.data, v.size() * 8);
  } else if (t.dtype == ONNX_INT32) {
    for (size_t i = 0; i < v.size(); ++i) v[i] = t.as<int32_t>()[i];
  } else {
    execFail(std::string(what) + " must be int64 or int32, got " + onnxTypeName(t.dtype));
  }
  return v;
}

void requireFloat(const Tensor &t, const char *what) {
  if (t.dtype != ONNX_FLOAT) execFail(std::string(what) + " must be float32, got " + onnxTypeName(t.dtype));
}

int64_t attrInt(const NodeProto &n, const char *name, int64_t def) {
  const Attr *a = n.attr(name);
  if (!a) return def;
  if (a->type != ATTR_INT) loadFail("attribute '" + std::string(name) + "' of node '" + n.name + "' must be an int");
  return a->i;
}
float attrFloat(const NodeProto &n, const char *name, float def) {
  const Attr *a = n.attr(name);
  if (!a) return def;
  if (a->type != ATTR_FLOAT) loadFail("attribute '" + std::string(name) + "' of node '" + n.name + "' must be a float");
  return a->f;
}
std::string attrStr(const NodeProto &n, const char *name, const std::string &def) {
  const Attr *a = n.attr(name);
  if (!a) return def;
  if (a->type != ATTR_STRING) loadFail("attribute '" + std::string(name) + "' of node '" + n.name + "' must be a string");
  return a->s;
}
std::vector<int64_t> attrInts(const NodeProto &n, const char *name) {
  const Attr *a = n.attr(name);
  if (!a) return {};
  if (a->type != ATTR_INTS && a->type != ATTR_INT) {
    loadFail("attribute '" + std::string(name) + "' of node '" + n.name + "' must be a list of ints");
  }
  if (a->type == ATTR_INT) return {a->i};
  return a->ints;
}
bool hasAttr(const NodeProto &n, const char *name) { return n.attr(name) != nullptr; }

const OpDef *findOp(const std::string &opType) {
  for (size_t i = 0; i < kElementwiseOpsCount; ++i) {
    if (opType == kElementwiseOps[i].name) return &kElementwiseOps[i];
  }
  for (size_t i = 0; i < kTensorOpsCount; ++i) {
    if (opType == kTensorOps[i].name) return &kTensorOps[i];
  }
  for (size_t i = 0; i < kGemmOpsCount; ++i) {
    if (opType == kGemmOps[i].name) return &kGemmOps[i];
  }
  for (size_t i = 0; i < kNnOpsCount; ++i) {
    if (opType == kNnOps[i].name) return &kNnOps[i];
  }
  return nullptr;
}

std::string supportedOps() {
  std::string s;
  for (size_t i = 0; i < kGemmOpsCount; ++i) s += std::string(s.empty() ? "" : ", ") + kGemmOps[i].name;
  for (size_t i = 0; i < kNnOpsCount; ++i) s += std::string(", ") + kNnOps[i].name;
  for (size_t i = 0; i < kElementwiseOpsCount; ++i) s += std::string(", ") + kElementwiseOps[i].name;
  for (size_t i = 0; i < kTensorOpsCount; ++i) s += std::string(", ") + kTensorOps[i].name;
  return s + ", Constant";
}

std::string Node::label() const {
  return proto->opType + " node '" + (proto->name.empty() ? std::string("<unnamed>") : proto->name) + "'";
}

namespace {

std::string nodeLabel(const NodeProto &n, size_t idx) {
  return n.opType + " node '" + (n.name.empty() ? "#" + std::to_string(idx) : n.name) + "'";
}

// A Constant node becomes a constant slot: its value attribute, or value_float(s)/value_int(s).
TensorData constantValue(const NodeProto &n, const std::string &label) {
  TensorData t;
  if (const Attr *a = n.attr("value")) {
    if (a->type != ATTR_TENSOR || !a->t) loadFail(label + ": attribute 'value' must be a tensor");
    return *a->t;
  }
  if (const Attr *a = n.attr("value_float")) {
    t.dtype = ONNX_FLOAT;
    t.bytes.resize(4);
    std::memcpy(t.bytes.data(), &a->f, 4);
  } else if (const Attr *a = n.attr("value_floats")) {
    t.dtype = ONNX_FLOAT;
    t.dims = {int64_t(a->floats.size())};
    t.bytes.resize(a->floats.size() * 4);
    if (!a->floats.empty()) std::memcpy(t.bytes.data(), a->floats.data(), t.bytes.size());
  } else if (const Attr *a = n.attr("value_int")) {
    t.dtype = ONNX_INT64;
    t.bytes.resize(8);
    std::memcpy(t.bytes.data(), &a->i, 8);
  } else if (const Attr *a = n.attr("value_ints")) {
    t.dtype = ONNX_INT64;
    t.dims = {int64_t(a->ints.size())};
    t.bytes.resize(a->ints.size() * 8);
    if (!a->ints.empty()) std::memcpy(t.bytes.data(), a->ints.data(), t.bytes.size());
  } else {
    fail(ACL_ERROR_MODEL_MISSING_ATTR, label + " has no supported value attribute");
  }
  return t;
}

int newConstSlot(Graph &g, const std::string &name, const TensorData &t) {
  Tensor s;
  s.dtype = t.dtype;
  s.shape = t.dims;
  s.isConst = true;
  s.data = s.buf.ensure(t.bytes.size() ? t.bytes.size() : 1);
  if (!t.bytes.empty()) std::memcpy(s.data, t.bytes.data(), t.bytes.size());
  g.slots.push_back(std::move(s));
  g.slotNames.push_back(name);
  g.weightBytes += t.bytes.size();
  return int(g.slots.size() - 1);
}

}  // namespace

std::unique_ptr<Graph> buildGraph(ModelProto &&m) {
  auto g = std::make_unique<Graph>();
  g->proto = std::move(m);
  ModelProto &p = g->proto;
  if (p.opset < 1) p.opset = 1;
  std::map<std::string, int> byName;

  for (const TensorData &t : p.initializers) {
    if (t.name.empty()) loadFail("an initializer has no name");
    if (byName.count(t.name)) loadFail("initializer '" + t.name + "' is defined twice");
    byName[t.name] = newConstSlot(*g, t.name, t);
  }
  for (const ValueInfo &vi : p.inputs) {
    if (byName.count(vi.name)) {
      // Pre-IR4 models list initializers as inputs too; a real input listed twice is an error
      // (the model description would count it twice against one value).
      if (!g->slots[size_t(byName[vi.name])].isConst) loadFail("graph input '" + vi.name + "' is listed twice");
      continue;
    }
    if (vi.name.empty()) loadFail("a graph input has no name");
    if (vi.elemType != ONNX_FLOAT && vi.elemType != ONNX_INT64 && vi.elemType != ONNX_INT32) {
      fail(ACL_ERROR_UNSUPPORTED_DATA_TYPE, "graph input '" + vi.name + "' has type " + onnxTypeName(vi.elemType) +
                                                "; the simulator accepts float32, int64 and int32 inputs");
    }
    if (!vi.hasShape) loadFail("graph input '" + vi.name + "' has no shape");
    Tensor s;
    s.dtype = vi.elemType;
    g->slots.push_back(std::move(s));
    g->slotNames.push_back(vi.name);
    byName[vi.name] = int(g->slots.size() - 1);
    g->inputSlots.push_back(byName[vi.name]);
  }
  if (g->inputSlots.empty()) loadFail("the graph has no inputs");

  // Constant nodes are folded into constant slots; the rest are validated then sorted.
  std::map<std::string, size_t> producer;
  std::vector<size_t> live;
  for (size_t i = 0; i < p.nodes.size(); ++i) {
    const NodeProto &n = p.nodes[i];
    const std::string label = nodeLabel(n, i);
    if (!n.domain.empty() && n.domain != "ai.onnx") {
      loadFail("unsupported operator '" + n.domain + "::" + n.opType + "' (" + label + ")");
    }
    for (const std::string &o : n.outputs) {
      if (o.empty()) continue;
      if (byName.count(o) || producer.count(o)) loadFail(label + " redefines value '" + o + "'");
    }
    if (n.opType == "Constant") {
      if (n.outputs.size() != 1 || n.outputs[0].empty()) loadFail(label + " must have one output");
      byName[n.outputs[0]] = newConstSlot(*g, n.outputs[0], constantValue(n, label));
      continue;
    }
    const OpDef *op = findOp(n.opType);
    if (!op) loadFail("unsupported operator '" + n.opType + "' (" + label + "); supported: " + supportedOps());
    const int nin = int(n.inputs.size()), nout = int(n.outputs.size());
    if (nin < op->minIn || nin > op->maxIn) {
      loadFail(label + " has " + std::to_string(nin) + " inputs; the simulator supports " +
               std::to_string(op->minIn) + ".." + std::to_string(op->maxIn));
    }
    if (nout < op->minOut || nout > op->maxOut) {
      loadFail(label + " has " + std::to_string(nout) + " outputs; the simulator supports " +
               std::to_string(op->minOut) + ".." + std::to_string(op->maxOut));
    }
    for (int k = 0; k < op->minIn; ++k) {
      if (n.inputs[size_t(k)].empty()) loadFail(label + " is missing required input " + std::to_string(k));
    }
    for (int k = 0; k < op->minOut; ++k) {
      if (n.outputs[size_t(k)].empty()) loadFail(label + " is missing required output " + std::to_string(k));
    }
    try {
      if (op->check) op->check(n, p.opset);
    } catch (SimError &e) {
      e.msg = label + ": " + e.msg;
      throw;
    }
    for (const std::string &o : n.outputs) {
      if (!o.empty()) producer[o] = i;
    }
    live.push_back(i);
  }

  // Kahn's algorithm over the live nodes; inputs must come from a slot or another node.
  std::map<size_t, size_t> pending;
  std::map<size_t, std::vector<size_t>> consumers;
  for (size_t i : live) {
    const NodeProto &n = p.nodes[i];
    size_t deps = 0;
    for (const std::string &in : n.inputs) {
      if (in.empty() || byName.count(in)) continue;
      auto it = producer.find(in);
      if (it == producer.end()) {
        loadFail(nodeLabel(n, i) + " reads '" + in + "', which no node, initializer or graph input defines");
      }
      ++deps;
      consumers[it->second].push_back(i);
    }
    pending[i] = deps;
  }
  std::queue<size_t> ready;
  for (size_t i : live) {
    if (pending[i] == 0) ready.push(i);
  }
  std::vector<size_t> order;
  while (!ready.empty()) {
    size_t i = ready.front();
    ready.pop();
    order.push_back(i);
    for (size_t c : consumers[i]) {
      if (--pending[c] == 0) ready.push(c);
    }
  }
  if (order.size() != live.size()) loadFail("the graph has a cycle");

  for (size_t i : order) {
    const NodeProto &n = p.nodes[i];
    for (const std::string &o : n.outputs) {
      if (o.empty()) continue;
      g->slots.emplace_back();
      g->slotNames.push_back(o);
      byName[o] = int(g->slots.size() - 1);
    }
  }
  for (size_t i : order) {
    const NodeProto &n = p.nodes[i];
    Node node;
    node.proto = &n;
    node.op = findOp(n.opType);
    for (const std::string &in : n.inputs) node.in.push_back(in.empty() ? -1 : byName.at(in));
    for (const std::string &o : n.outputs) node.out.push_back(o.empty() ? -1 : byName.at(o));
    g->nodes.push_back(std::move(node));
  }
  if (p.outputs.empty()) loadFail("the graph has no outputs");
  for (const ValueInfo &vi : p.outputs) {
    auto it = byName.find(vi.name);
    if (it == byName.end()) loadFail("graph output '" + vi.name + "' is not produced by any node");
    g->outputSlots.push_back(it->second);
  }
  return g;
}

namespace {
const bool g_opTimes = std::getenv("NPU_FLEET_SIM_OP_TIMES") != nullptr;
}

Graph::~Graph() {
  if (!g_opTimes || nodes.empty() || nodes[0].calls == 0) return;
  double total = 0;
  for (const Node &n : nodes) total += n.totalMs;
  std::fprintf(stderr, "[acl-sim] op times for graph '%s' (%llu runs, %.3f ms per run):\n", proto.graphName.c_str(),
               static_cast<unsigned long long>(nodes[0].calls), total / double(nodes[0].calls));
  for (const Node &n : nodes) {
    std::fprintf(stderr, "  %8.3f ms/run %5.1f%%  %s\n", n.totalMs / double(n.calls), total > 0 ? 100.0 * n.totalMs / total : 0.0,
                 n.label().c_str());
  }
}

void Graph::run() {
  for (Node &n : nodes) {
    try {
      if (g_opTimes) {
        const auto t0 = Clock::now();
        n.op->run(n, *this);
        n.totalMs += msSince(t0);
        ++n.calls;
        continue;
      }
      n.op->run(n, *this);
    } catch (SimError &e) {
      e.msg = n.label() + ": " + e.msg;
      throw;
    } catch (const std::bad_alloc &) {
      fail(ACL_ERROR_RT_MODEL_EXECUTE, n.label() + ": out of host memory");
    }
  }
}

size_t Graph::workspaceBytes() const {
  size_t s = stateBytes;
  for (const Tensor &t : slots) {
    if (!t.isConst) s += t.buf.capacity();
  }
  return s;
}

}  // namespace sim
