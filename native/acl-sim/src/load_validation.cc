// The validation run at load (see load_validation.h): data-dependence of each value and the run.
#include "load_validation.h"

#include <cstring>
#include <new>

#include "ops.h"

namespace sim {

DataDeps dataDeps(const Graph &g) {
  DataDeps d;
  d.value.assign(g.slots.size(), false);
  d.shape.assign(g.slots.size(), false);
  for (int s : g.inputSlots) d.value[size_t(s)] = true;
  for (const Node &n : g.nodes) {
    bool anyValue = false, anyShape = false, shapeFromValues = false;
    for (size_t k = 0; k < n.in.size(); ++k) {
      if (n.in[k] < 0) continue;
      const size_t s = size_t(n.in[k]);
      anyValue = anyValue || d.value[s];
      anyShape = anyShape || d.shape[s];
      if (k < 32 && (n.op->shapeArgs >> k & 1u) && d.value[s]) shapeFromValues = true;
    }
    // Shape reads only its input's shape, so torch-style shape arithmetic stays judgeable.
    const bool outValue = std::strcmp(n.op->name, "Shape") == 0 ? anyShape : anyValue || anyShape;
    for (int o : n.out) {
      if (o < 0) continue;
      d.value[size_t(o)] = outValue;
      d.shape[size_t(o)] = anyShape || shapeFromValues;
    }
  }
  return d;
}

namespace {

// Whether a run-time failure of n may come from the values of the graph inputs rather than from
// the model: an input's shape depends on them, or the op checks the values of an input that does.
bool dataDependent(const Node &n, const DataDeps &d) {
  for (size_t k = 0; k < n.in.size(); ++k) {
    if (n.in[k] < 0) continue;
    const size_t s = size_t(n.in[k]);
    if (d.shape[s]) return true;
    if (k < 32 && (n.op->checkedArgs >> k & 1u) && d.value[s]) return true;
  }
  return false;
}

}  // namespace

ValidationOutcome runValidation(Graph &g, const DataDeps &deps) {
  ValidationOutcome out;
  out.unknown.assign(g.slots.size(), false);
  for (Node &n : g.nodes) {
    bool skip = false;
    for (int s : n.in) skip = skip || (s >= 0 && out.unknown[size_t(s)]);
    if (!skip) {
      try {
        n.op->run(n, g);
      } catch (SimError &e) {
        if (e.code != int(ACL_ERROR_RT_MODEL_EXECUTE) || !dataDependent(n, deps)) {
          e.msg = n.label() + ": " + e.msg;
          throw;
        }
        if (out.unjudged.empty()) out.unjudged = n.label() + ": " + e.msg;
        skip = true;
      } catch (const std::bad_alloc &) {
        fail(ACL_ERROR_RT_MODEL_EXECUTE, n.label() + ": out of host memory");
      }
    }
    if (skip) {
      for (int o : n.out) {
        if (o >= 0) out.unknown[size_t(o)] = true;
      }
    }
  }
  return out;
}

}  // namespace sim
