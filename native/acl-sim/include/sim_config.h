// Simulator configuration read from the environment at aclInit.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#pragma GCC visibility push(hidden)
namespace sim {

struct Fault {
  // NOSYNCWAIT is not about executions: aclrtSynchronizeEventWithTimeout on the device returns
  // ACL_ERROR_RT_FEATURE_NOT_SUPPORT (207000), as on a SoC/driver that exports the symbol but does
  // not support the call. CURDIMSATRUN: aclmdlSetDynamicBatchSize leaves the model's current
  // output dims alone, only an execution updates them (a library that reads them at execution, not
  // at the setter). findFault (executions) skips both.
  enum Kind { FAIL, HANG, SLOW, CRASH, NOSYNCWAIT, CURDIMSATRUN };
  int device = -1;     // -1: every device (each counts its own executions)
  Kind kind = FAIL;
  uint64_t from = 0;   // 1-based execution numbers, inclusive
  uint64_t to = 0;     // UINT64_MAX for "k+"
  bool byValue = false;  // WHEN is value=V: executions whose first input (float32) holds V
  float value = 0;
  double hangMs = -1;  // HANG: -1 = until the device is reset / aclFinalize
  double factor = 1;   // SLOW xF
  double addMs = 0;    // SLOW +duration
  std::string text;    // as written, for messages
};

struct SimConfig {
  uint32_t devices = 2;
  size_t memoryBytes = size_t(1) << 30;
  bool profileOn = false;
  double baseMs = 0, perItemMs = 0;
  std::vector<Fault> faults;
  bool strictPinned = true;
  // Ops the validation run at load may do (multiply-adds, window taps, kElementOps per element
  // read or written), all its runs of one load together. 0 (the default): scaled with the
  // model's weights, see defaultWorkBudget in load_validation.h.
  uint64_t loadWorkBudget = 0;
};

// Parses NPU_FLEET_SIM_* variables; false with a message naming the variable on error.
bool loadConfigFromEnv(SimConfig &cfg, std::string &err);
// Exposed for tests: parse one variable's value.
bool parseProfile(const std::string &s, SimConfig &cfg, std::string &err);
bool parseFaults(const std::string &s, std::vector<Fault> &out, std::string &err);
// Parses "2ms", "250us", "1.5s", "3" (ms) into milliseconds.
bool parseDurationMs(const std::string &s, double &ms);

}  // namespace sim
#pragma GCC visibility pop
