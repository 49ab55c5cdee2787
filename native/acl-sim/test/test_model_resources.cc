// Model resources: device memory accounting and capacity, the device time model, injected
// faults, steady-state executions, and a process exit with an execution hung.
#include <chrono>
#include <cstdio>
#include <fstream>

#include "test_models.h"

extern const char *g_argv0;

namespace {

using Clock = std::chrono::steady_clock;
double msSince(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

}  // namespace

void memoryAccounting() {
  size_t free0, total, free1, free2;
  ACL_OK(aclrtGetMemInfo(ACL_HBM_MEM, &free0, &total));
  const std::string mlp = mlpModel();
  uint32_t id;
  ACL_OK(aclmdlLoadFromMem(mlp.data(), mlp.size(), &id));
  ACL_OK(aclrtGetMemInfo(ACL_HBM_MEM, &free1, &total));
  const size_t weights = (784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10) * 4;
  CHECK(free0 - free1 >= weights);
  size_t work = 0, weight = 0;
  const char *path = "/tmp/acl_sim_test_mlp.onnx";
  {
    std::ofstream f(path, std::ios::binary);
    f << mlp;
  }
  ACL_OK(aclmdlQuerySize(path, &work, &weight));
  CHECK(weight == weights && work > 0 && free0 - free1 == work + weight);
  ACL_OK(aclmdlUnload(id));
  ACL_OK(aclrtGetMemInfo(ACL_HBM_MEM, &free2, &total));
  CHECK(free2 == free0);
  // Loading from file works the same way.
  ACL_OK(aclmdlLoadFromFile(path, &id));
  ACL_OK(aclmdlUnload(id));
  std::remove(path);
}

void memoryCapacity() {
  setEnv("NPU_FLEET_SIM_DEVICE_MEMORY_BYTES", "600000");
  ACL_OK(aclInit(nullptr));
  ACL_OK(aclrtSetDevice(0));
  const std::string mlp = mlpModel();  // ~0.96 MB of weights
  uint32_t id;
  CHECK_CODE(aclmdlLoadFromMem(mlp.data(), mlp.size(), &id), int(ACL_ERROR_GE_MEMORY_ALLOCATION));
  const char *m = aclGetRecentErrMsg();
  CHECK(m && std::strstr(m, "out of memory"));
  size_t freeB, total;
  ACL_OK(aclrtGetMemInfo(ACL_HBM_MEM, &freeB, &total));
  CHECK(freeB == total);
  ACL_OK(aclFinalize());
  setEnv("NPU_FLEET_SIM_DEVICE_MEMORY_BYTES", nullptr);
}

void timeModelAndFaults() {
  const std::string mlp = mlpModel(64, 32, 16, 10);
  setEnv("NPU_FLEET_SIM_PROFILE", "base=30ms,perItem=2ms");
  // nosyncwait comes first: it is not an execution fault, so it must not shadow the others.
  setEnv("NPU_FLEET_SIM_FAULTS", "nosyncwait,dev0:fail@2,dev1:slow@1:x3,dev1:hang@2:150ms,dev0:slow@4:100ms");
  ACL_OK(aclInit(nullptr));
  ACL_OK(aclrtSetDevice(0));
  auto t0 = Clock::now();
  RunResult r = runModel(mlp, {randF({8, 64}, 1)}, RunOpts{false, {}, 8, true, 0});  // exec 1
  double ms = msSince(t0);
  CHECK(r.execErr == 0);
  CHECK(ms >= 45 && ms < 400);  // 30 + 2*8
  r = runModel(mlp, {randF({1, 64}, 2)}, RunOpts{true, {}, 1, true, 0});  // exec 2: injected failure, async
  CHECK(r.execErr == ACL_ERROR_RT_MODEL_EXECUTE && r.msg.find("fail@2") != std::string::npos);
  t0 = Clock::now();
  r = runModel(mlp, {randF({1, 64}, 3)}, RunOpts{false, {}, 1, true, 0});  // exec 3
  ms = msSince(t0);
  CHECK(r.execErr == 0 && ms >= 30 && ms < 300);
  t0 = Clock::now();
  r = runModel(mlp, {randF({1, 64}, 3)}, RunOpts{false, {}, 1, true, 0});  // exec 4: +100 ms
  ms = msSince(t0);
  CHECK(r.execErr == 0 && ms >= 130 && ms < 500);
  uint64_t count = 0;
  ACL_OK(aclsimGetExecutionCount(0, &count));
  CHECK(count == 4);
  ACL_OK(aclrtSetDevice(1));
  t0 = Clock::now();
  r = runModel(mlp, {randF({2, 64}, 4)}, RunOpts{false, {}, 2, true, 0});  // dev1 exec 1: x3
  ms = msSince(t0);
  CHECK(r.execErr == 0 && ms >= 100 && ms < 600);  // (30 + 4) * 3
  t0 = Clock::now();
  r = runModel(mlp, {randF({2, 64}, 4)}, RunOpts{true, {}, 2, true, 0});  // dev1 exec 2: hang 150 ms, then ok
  ms = msSince(t0);
  CHECK(r.execErr == 0 && ms >= 170 && ms < 700);
  ACL_OK(aclFinalize());

  // A hang without a duration lasts until the device is reset; the stream wait times out.
  setEnv("NPU_FLEET_SIM_PROFILE", nullptr);
  setEnv("NPU_FLEET_SIM_FAULTS", "hang@1");
  ACL_OK(aclInit(nullptr));
  ACL_OK(aclrtSetDevice(0));
  uint32_t id;
  ACL_OK(aclmdlLoadFromMem(mlp.data(), mlp.size(), &id));
  aclmdlDesc *d = aclmdlCreateDesc();
  ACL_OK(aclmdlGetDesc(d, id));
  void *a, *b, *c;
  ACL_OK(aclrtMalloc(&a, aclmdlGetInputSizeByIndex(d, 0), ACL_MEM_MALLOC_HUGE_FIRST));
  ACL_OK(aclrtMalloc(&b, 8, ACL_MEM_MALLOC_HUGE_FIRST));
  ACL_OK(aclrtMalloc(&c, aclmdlGetOutputSizeByIndex(d, 0), ACL_MEM_MALLOC_HUGE_FIRST));
  aclmdlDataset *in = aclmdlCreateDataset(), *out = aclmdlCreateDataset();
  aclmdlAddDatasetBuffer(in, aclCreateDataBuffer(a, aclmdlGetInputSizeByIndex(d, 0)));
  aclmdlAddDatasetBuffer(in, aclCreateDataBuffer(b, 8));
  aclmdlAddDatasetBuffer(out, aclCreateDataBuffer(c, aclmdlGetOutputSizeByIndex(d, 0)));
  ACL_OK(aclmdlSetDynamicBatchSize(id, in, 1, 1));
  aclrtStream s;
  ACL_OK(aclrtCreateStream(&s));
  ACL_OK(aclmdlExecuteAsync(id, in, out, s));
  t0 = Clock::now();
  CHECK_CODE(aclrtSynchronizeStreamWithTimeout(s, 100), ACL_ERROR_RT_STREAM_SYNC_TIMEOUT);
  CHECK(msSince(t0) >= 90);
  aclrtStreamStatus st;
  ACL_OK(aclrtStreamQuery(s, &st));
  CHECK(st == ACL_STREAM_STATUS_NOT_READY);
  // ExecuteV2 with a stream timeout behaves like execute + synchronize-with-timeout.
  aclmdlExecConfigHandle *h = aclmdlCreateExecConfigHandle();
  int32_t tmo = 30;
  ACL_OK(aclmdlSetExecConfigOpt(h, ACL_MDL_STREAM_SYNC_TIMEOUT, &tmo, sizeof tmo));
  CHECK_CODE(aclmdlExecuteV2(id, in, out, s, h), ACL_ERROR_RT_STREAM_SYNC_TIMEOUT);
  aclmdlDestroyExecConfigHandle(h);
  t0 = Clock::now();
  ACL_OK(aclrtResetDevice(0));  // wakes the hang, drops everything on the device
  CHECK(msSince(t0) < 1000);
  aclDestroyDataBuffer(aclmdlGetDatasetBuffer(in, 0));
  aclDestroyDataBuffer(aclmdlGetDatasetBuffer(in, 1));
  aclDestroyDataBuffer(aclmdlGetDatasetBuffer(out, 0));
  aclmdlDestroyDataset(in);
  aclmdlDestroyDataset(out);
  aclmdlDestroyDesc(d);
  ACL_OK(aclFinalize());
  setEnv("NPU_FLEET_SIM_FAULTS", nullptr);
}

void manyExecutions() {
  // Steady-state executions neither leak nor change accounting.
  const std::string mlp = mlpModel(64, 32, 16, 10);
  size_t free0, total, free1;
  ACL_OK(aclrtGetMemInfo(ACL_HBM_MEM, &free0, &total));
  for (int i = 0; i < 200; ++i) {
    RunResult r = runModel(mlp, {randF({2, 64}, uint32_t(i))}, RunOpts{i % 2 == 0, {}, 2, true, 0});
    if (r.execErr) {
      CHECK(r.execErr == 0);
      break;
    }
  }
  ACL_OK(aclrtGetMemInfo(ACL_HBM_MEM, &free1, &total));
  CHECK(free1 == free0);
}

// The process exits (no aclFinalize) while an execution hangs on a stream: exit must not wait.
void exitWhileHung() {
  const std::string cmd = std::string("ASAN_OPTIONS=detect_leaks=0 NPU_FLEET_SIM_FAULTS=hang@1 timeout 20 ") + g_argv0 + " --exit-child";
  const auto t0 = Clock::now();
  const int rc = std::system(cmd.c_str());
  CHECK(rc == 0);
  CHECK(msSince(t0) < 10000);
}

int exitChildMain() {
  if (aclInit(nullptr) || aclrtSetDevice(0)) return 2;
  const std::string mlp = mlpModel(16, 8, 8, 4);
  uint32_t id;
  if (aclmdlLoadFromMem(mlp.data(), mlp.size(), &id)) return 3;
  const DynBatchIO io = dynBatchIO(id);
  aclmdlDataset *in = io.in, *out = io.out;
  aclmdlSetDynamicBatchSize(id, in, 1, 1);
  aclrtStream s;
  aclrtCreateStream(&s);
  if (aclmdlExecuteAsync(id, in, out, s)) return 4;
  if (aclrtSynchronizeStreamWithTimeout(s, 50) != ACL_ERROR_RT_STREAM_SYNC_TIMEOUT) return 5;
  std::exit(0);  // static destructors run; the hung stream thread must not be joined
}
