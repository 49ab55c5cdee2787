// The validation run at load (see load_validation.h): data-dependence of each value, the work
// budget, and the run itself.
#include "load_validation.h"

#include <algorithm>
#include <cstring>
#include <new>

#include "ops.h"

namespace sim {

namespace {
thread_local bool tl_budgetArmed = false;
thread_local double tl_budgetOps = 0;
thread_local double tl_spentOps = 0;
}  // namespace

uint64_t defaultWorkBudget(size_t weightBytes, uint64_t maxBatch) {
  const double scaled = kOpsPerWeightByte * double(weightBytes) * (double(maxBatch) + 2);
  const double ops = std::max(kWorkFloorOps, scaled);
  return ops >= 9.2e18 ? uint64_t(9.2e18) : uint64_t(ops);  // well inside uint64_t and double
}

WorkBudget::WorkBudget(uint64_t ops) {
  tl_budgetArmed = true;
  tl_budgetOps = double(ops);
  tl_spentOps = 0;
}
WorkBudget::~WorkBudget() { tl_budgetArmed = false; }

void chargeWork(double ops) {
  if (!tl_budgetArmed || !validationRun()) return;
  tl_spentOps += ops;
  if (tl_spentOps > tl_budgetOps) {
    // Not ACL_ERROR_RT_MODEL_EXECUTE, so runValidation never takes it for a data-dependent failure.
    fail(ACL_ERROR_PARSE_MODEL, "the validation run at load needs more than its work budget of " +
                                    std::to_string(uint64_t(tl_budgetOps)) +
                                    " ops (multiply-adds, or " + std::to_string(int(kElementOps)) +
                                    " per element moved); NPU_FLEET_SIM_LOAD_WORK_BUDGET sets it");
  }
}

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

double elements(const Graph &g, const std::vector<int> &slots) {
  double e = 0;
  for (int s : slots) {
    if (s >= 0) e += double(g.slots[size_t(s)].numel());
  }
  return e;
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
        chargeWork(kElementOps * elements(g, n.in));
        n.op->run(n, g);
        chargeWork(kElementOps * elements(g, n.out));
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
