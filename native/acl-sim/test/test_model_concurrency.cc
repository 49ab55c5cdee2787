// Concurrency: the runtime's threads (stream workers, the compute pool, simulated-time sleeps,
// hangs) driven from several host threads at once, the way the addon drives them. Meant to be
// run under ThreadSanitizer (`make test-tsan`) as much as to check results: every host thread
// records what it saw and the CHECKs run on the main thread after the joins (the harness's
// counters are not thread-safe).
#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>

#include "test_models.h"

namespace {

using Clock = std::chrono::steady_clock;
double msSince(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

constexpr int64_t kIn = 32, kOut = 8;

// Output of a synchronous reference run at `batch` (the oracle for the pipelined runs).
HostT reference(const std::string &mlp, const HostT &x, uint64_t batch) {
  RunResult r = runModel(mlp, {x}, RunOpts{false, {}, batch, true, 0});
  return r.outputs.empty() ? HostT{} : r.outputs[0];
}

// One device's pipeline, as the addon runs it (native/src/model_exec.cc): two slots, each with a
// stream, pinned staging and five events; batch k+1's copy-in overlaps batch k's execute, which
// it waits for with aclrtStreamWaitEvent; the host waits on the oldest evOut in 1 ms slices.
struct PipelineResult {
  int ok = 0, wrong = 0, aclErrors = 0, timeouts = 0;
};
void pipeline(int dev, const std::string &mlp, const std::vector<HostT> &xs, const std::vector<HostT> &want, int batches,
              PipelineResult &res) {
  auto note = [&](aclError e) {
    if (e) ++res.aclErrors;
  };
  if (aclrtSetDevice(dev)) return void(++res.aclErrors);
  aclrtContext ctx;
  note(aclrtCreateContext(&ctx, dev));
  uint32_t id;
  note(aclmdlLoadFromMem(mlp.data(), mlp.size(), &id));
  aclmdlDesc *d = aclmdlCreateDesc();
  note(aclmdlGetDesc(d, id));
  const size_t inBytes = aclmdlGetInputSizeByIndex(d, 0), outBytes = aclmdlGetOutputSizeByIndex(d, 0);
  struct Slot {
    aclrtStream s;
    void *devIn, *devMb, *devOut, *hostIn, *hostOut;
    aclmdlDataset *in, *out;
    aclrtEvent evIn, evExec, evOut;
    int batch = -1;
  } slots[2];
  for (Slot &s : slots) {
    note(aclrtCreateStream(&s.s));
    note(aclrtMalloc(&s.devIn, inBytes, ACL_MEM_MALLOC_HUGE_FIRST));
    note(aclrtMalloc(&s.devMb, 8, ACL_MEM_MALLOC_HUGE_FIRST));
    note(aclrtMalloc(&s.devOut, outBytes, ACL_MEM_MALLOC_HUGE_FIRST));
    note(aclrtMallocHost(&s.hostIn, inBytes));
    note(aclrtMallocHost(&s.hostOut, outBytes));
    s.in = aclmdlCreateDataset();
    s.out = aclmdlCreateDataset();
    note(aclmdlAddDatasetBuffer(s.in, aclCreateDataBuffer(s.devIn, inBytes)));
    note(aclmdlAddDatasetBuffer(s.in, aclCreateDataBuffer(s.devMb, 8)));
    note(aclmdlAddDatasetBuffer(s.out, aclCreateDataBuffer(s.devOut, outBytes)));
    for (aclrtEvent *e : {&s.evIn, &s.evExec, &s.evOut}) note(aclrtCreateEvent(e));
  }
  auto retire = [&](Slot &s) {
    aclError e;
    while ((e = aclrtSynchronizeEventWithTimeout(s.evOut, 1)) == ACL_ERROR_RT_EVENT_SYNC_TIMEOUT) ++res.timeouts;
    note(e);
    note(aclrtSynchronizeStream(s.s));
    const HostT &w = want[size_t(s.batch) % want.size()];
    const bool same = std::memcmp(s.hostOut, w.data.data(), w.data.size()) == 0;
    ++(same ? res.ok : res.wrong);
    s.batch = -1;
  };
  int last = -1;
  for (int k = 0; k < batches; ++k) {
    const int si = k % 2;
    Slot &s = slots[si];
    if (s.batch >= 0) retire(s);
    const HostT &x = xs[size_t(k) % xs.size()];
    std::memcpy(s.hostIn, x.data.data(), x.data.size());
    note(aclrtMemcpyAsync(s.devIn, inBytes, s.hostIn, x.data.size(), ACL_MEMCPY_HOST_TO_DEVICE, s.s));
    note(aclrtRecordEvent(s.evIn, s.s));
    if (last >= 0 && slots[last].batch >= 0) note(aclrtStreamWaitEvent(s.s, slots[last].evExec));
    note(aclmdlSetDynamicBatchSize(id, s.in, 1, uint64_t(x.shape[0])));
    note(aclmdlExecuteAsync(id, s.in, s.out, s.s));
    note(aclrtRecordEvent(s.evExec, s.s));
    note(aclrtMemcpyAsync(s.hostOut, outBytes, s.devOut, want[size_t(k) % want.size()].data.size(),
                          ACL_MEMCPY_DEVICE_TO_HOST, s.s));
    note(aclrtRecordEvent(s.evOut, s.s));
    s.batch = k;
    last = si;
  }
  for (Slot &s : slots) {
    if (s.batch >= 0) retire(s);
  }
  for (Slot &s : slots) {
    for (aclrtEvent e : {s.evIn, s.evExec, s.evOut}) note(aclrtDestroyEvent(e));
    note(aclrtDestroyStream(s.s));
    for (aclmdlDataset *ds : {s.in, s.out}) {
      for (size_t i = 0; i < aclmdlGetDatasetNumBuffers(ds); ++i) aclDestroyDataBuffer(aclmdlGetDatasetBuffer(ds, i));
      aclmdlDestroyDataset(ds);
    }
    for (void *p : {s.devIn, s.devMb, s.devOut}) note(aclrtFree(p));
    for (void *p : {s.hostIn, s.hostOut}) note(aclrtFreeHost(p));
  }
  note(aclmdlUnload(id));
  aclmdlDestroyDesc(d);
  note(aclrtDestroyContext(ctx));
  note(aclrtResetDevice(dev));
}

// Two devices pipelined at once (with the time model, slow and short-hang faults, and the
// compute pool shared between them), plus a thread churning device memory on device 0. The main
// thread keeps both devices open, so their accounting can be compared before and after.
void pipelinesOnTwoDevices() {
  setEnv("NPU_FLEET_SIM_PROFILE", "base=1ms,perItem=0.1ms");
  setEnv("NPU_FLEET_SIM_FAULTS", "dev0:slow@3:x2,dev1:hang@4:30ms,slow@9:5ms");
  ACL_OK(aclInit(nullptr));
  ACL_OK(aclrtSetDevice(0));
  const std::string mlp = mlpModel(kIn, 64, 16, kOut);
  std::vector<HostT> xs, want;
  for (uint32_t i = 0; i < 4; ++i) {
    xs.push_back(randF({int64_t(1) << i, kIn}, 100 + i));
    want.push_back(reference(mlp, xs.back(), uint64_t(1) << i));
  }
  size_t free0[2], free1[2], total;
  ACL_OK(aclrtGetMemInfo(ACL_HBM_MEM, &free0[0], &total));
  ACL_OK(aclrtSetDevice(1));
  ACL_OK(aclrtGetMemInfo(ACL_HBM_MEM, &free1[0], &total));
  PipelineResult r0, r1;
  std::atomic<bool> stop{false};
  int churnErrors = 0, churnRounds = 0;
  std::thread churn([&] {
    size_t total;
    if (aclrtSetDevice(0)) return void(++churnErrors);
    while (!stop.load()) {
      void *p[4];
      for (size_t i = 0; i < 4; ++i) churnErrors += aclrtMalloc(&p[i], 1000 * (i + 1), ACL_MEM_MALLOC_HUGE_FIRST) != 0;
      size_t f;
      churnErrors += aclrtGetMemInfo(ACL_HBM_MEM, &f, &total) != 0;
      for (void *q : p) churnErrors += aclrtFree(q) != 0;
      ++churnRounds;
    }
    churnErrors += aclrtResetDevice(0) != 0;
  });
  std::thread t0([&] { pipeline(0, mlp, xs, want, 24, r0); });
  std::thread t1([&] { pipeline(1, mlp, xs, want, 24, r1); });
  t0.join();
  t1.join();
  stop = true;
  churn.join();
  for (const PipelineResult *r : {&r0, &r1}) {
    CHECK(r->aclErrors == 0);
    CHECK(r->ok == 24 && r->wrong == 0);
  }
  CHECK(r1.timeouts > 0);  // the 30 ms hang was waited out in 1 ms slices
  CHECK(churnErrors == 0 && churnRounds > 0);
  ACL_OK(aclrtGetMemInfo(ACL_HBM_MEM, &free1[1], &total));
  ACL_OK(aclrtSetDevice(0));
  ACL_OK(aclrtGetMemInfo(ACL_HBM_MEM, &free0[1], &total));
  CHECK(free0[1] == free0[0] && free1[1] == free1[0]);
  ACL_OK(aclFinalize());
  setEnv("NPU_FLEET_SIM_PROFILE", nullptr);
  setEnv("NPU_FLEET_SIM_FAULTS", nullptr);
}

// A device reset from one thread while another host thread waits (no timeout) on an event
// behind a hung execution and a third synchronizes its stream: both waits end, and nothing the
// reset frees is touched afterwards.
void resetWhileWaited() {
  setEnv("NPU_FLEET_SIM_FAULTS", "dev0:hang@2");
  ACL_OK(aclInit(nullptr));
  ACL_OK(aclrtSetDevice(0));
  aclrtContext ctx;
  ACL_OK(aclrtGetCurrentContext(&ctx));
  const std::string mlp = mlpModel(kIn, 16, 16, kOut);
  uint32_t id;
  ACL_OK(aclmdlLoadFromMem(mlp.data(), mlp.size(), &id));
  const DynBatchIO io = dynBatchIO(id);
  ACL_OK(aclmdlSetDynamicBatchSize(id, io.in, 1, 1));
  aclrtStream s;
  ACL_OK(aclrtCreateStream(&s));
  aclrtEvent ev;
  ACL_OK(aclrtCreateEvent(&ev));
  ACL_OK(aclmdlExecuteAsync(id, io.in, io.out, s));  // execution 1: runs
  ACL_OK(aclmdlExecuteAsync(id, io.in, io.out, s));  // execution 2: hangs until the reset
  ACL_OK(aclrtRecordEvent(ev, s));
  std::atomic<int> waited{0}, started{0};
  aclError evErr = -1, streamErr = -1;
  std::thread evWaiter([&] {
    aclrtSetCurrentContext(ctx);
    ++started;
    evErr = aclrtSynchronizeEvent(ev);
    ++waited;
  });
  std::thread streamWaiter([&] {
    aclrtSetCurrentContext(ctx);
    ++started;
    streamErr = aclrtSynchronizeStream(s);
    ++waited;
  });
  while (started.load() < 2) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(waited.load() == 0);
  const auto t0 = Clock::now();
  ACL_OK(aclrtResetDevice(0));
  evWaiter.join();
  streamWaiter.join();
  CHECK(msSince(t0) < 2000);
  CHECK(waited.load() == 2);
  // The reset completes pending records and stops the stream; a waiter that got there late
  // finds the handle gone (the context went with the device); the hung execution itself fails.
  CHECK(evErr == ACL_SUCCESS || evErr == ACL_ERROR_INVALID_PARAM);
  CHECK(streamErr == ACL_SUCCESS || streamErr == ACL_ERROR_RT_MODEL_EXECUTE || streamErr == ACL_ERROR_RT_CONTEXT_NULL);
  for (aclmdlDataset *ds : {io.in, io.out}) {
    for (size_t i = 0; i < aclmdlGetDatasetNumBuffers(ds); ++i) aclDestroyDataBuffer(aclmdlGetDatasetBuffer(ds, i));
    aclmdlDestroyDataset(ds);
  }
  aclmdlDestroyDesc(io.d);
  ACL_OK(aclFinalize());
  setEnv("NPU_FLEET_SIM_FAULTS", nullptr);
}

// Host functions and executions queued on a stream that is destroyed (draining) from another
// thread while they run; a third thread polls events recorded behind them.
void destroyStreamWhileBusy() {
  ACL_OK(aclInit(nullptr));
  ACL_OK(aclrtSetDevice(0));
  aclrtContext ctx;
  ACL_OK(aclrtGetCurrentContext(&ctx));
  const std::string mlp = mlpModel(kIn, 16, 16, kOut);
  uint32_t id;
  ACL_OK(aclmdlLoadFromMem(mlp.data(), mlp.size(), &id));
  const DynBatchIO io = dynBatchIO(id);
  ACL_OK(aclmdlSetDynamicBatchSize(id, io.in, 1, 1));
  static std::atomic<int> ran;
  ran = 0;
  for (int round = 0; round < 10; ++round) {
    aclrtStream s;
    ACL_OK(aclrtCreateStream(&s));
    aclrtEvent ev[4];
    for (aclrtEvent &e : ev) ACL_OK(aclrtCreateEvent(&e));
    for (int i = 0; i < 4; ++i) {
      ACL_OK(aclrtLaunchHostFunc(s, [](void *) { ++ran; }, nullptr));
      ACL_OK(aclmdlExecuteAsync(id, io.in, io.out, s));
      ACL_OK(aclrtRecordEvent(ev[i], s));
    }
    std::atomic<bool> done{false};
    int pollErrors = 0;
    std::thread poller([&] {
      aclrtSetCurrentContext(ctx);
      while (!done.load()) {
        for (aclrtEvent e : ev) {
          aclrtEventRecordedStatus st;
          pollErrors += aclrtQueryEventStatus(e, &st) != 0;
        }
      }
    });
    ACL_OK(aclrtDestroyStream(s));  // drains: everything queued runs first
    done = true;
    poller.join();
    CHECK(pollErrors == 0);
    for (aclrtEvent e : ev) {
      aclrtEventRecordedStatus st;
      ACL_OK(aclrtQueryEventStatus(e, &st));
      CHECK(st == ACL_EVENT_RECORDED_STATUS_COMPLETE);
      ACL_OK(aclrtDestroyEvent(e));
    }
  }
  CHECK(ran.load() == 40);
  for (aclmdlDataset *ds : {io.in, io.out}) {
    for (size_t i = 0; i < aclmdlGetDatasetNumBuffers(ds); ++i) aclDestroyDataBuffer(aclmdlGetDatasetBuffer(ds, i));
    aclmdlDestroyDataset(ds);
  }
  aclmdlDestroyDesc(io.d);
  ACL_OK(aclFinalize());
}

// Models loaded and unloaded on one device from two threads while a third executes another
// model synchronously and asynchronously: ids, accounting and the compute pool are shared.
void loadUnloadWhileExecuting() {
  ACL_OK(aclInit(nullptr));
  ACL_OK(aclrtSetDevice(0));
  aclrtContext ctx;
  ACL_OK(aclrtGetCurrentContext(&ctx));
  size_t free0, total;
  ACL_OK(aclrtGetMemInfo(ACL_HBM_MEM, &free0, &total));
  const std::string mlp = mlpModel(kIn, 64, 16, kOut);
  const HostT x = randF({4, kIn}, 7);
  const HostT want = reference(mlp, x, 4);
  std::atomic<bool> stop{false};
  int loadErrors = 0, loads = 0, execErrors = 0, execWrong = 0, execs = 0;
  auto loader = [&](int &errors, int &count) {
    aclrtSetCurrentContext(ctx);
    for (int i = 0; i < 15; ++i) {
      uint32_t id;
      if (aclmdlLoadFromMem(mlp.data(), mlp.size(), &id)) {
        ++errors;
        continue;
      }
      errors += aclmdlUnload(id) != 0;
      ++count;
    }
  };
  int loadErrors2 = 0, loads2 = 0;
  std::thread l1([&] { loader(loadErrors, loads); });
  std::thread l2([&] { loader(loadErrors2, loads2); });
  std::thread ex([&] {
    aclrtSetCurrentContext(ctx);
    uint32_t id;
    if (aclmdlLoadFromMem(mlp.data(), mlp.size(), &id)) return void(++execErrors);
    const DynBatchIO io = dynBatchIO(id);
    aclrtStream s;
    execErrors += aclrtCreateStream(&s) != 0;
    execErrors += aclrtMemcpy(io.a, x.data.size(), x.data.data(), x.data.size(), ACL_MEMCPY_HOST_TO_DEVICE) != 0;
    execErrors += aclmdlSetDynamicBatchSize(id, io.in, 1, 4) != 0;
    std::vector<uint8_t> got(want.data.size());
    while (!stop.load() || execs < 10) {
      const bool async = execs % 2 == 1;
      execErrors += (async ? aclmdlExecuteAsync(id, io.in, io.out, s) : aclmdlExecute(id, io.in, io.out)) != 0;
      if (async) execErrors += aclrtSynchronizeStream(s) != 0;
      execErrors += aclrtMemcpy(got.data(), got.size(), io.c, got.size(), ACL_MEMCPY_DEVICE_TO_HOST) != 0;
      execWrong += std::memcmp(got.data(), want.data.data(), got.size()) != 0;
      ++execs;
    }
    execErrors += aclrtDestroyStream(s) != 0;
    for (aclmdlDataset *ds : {io.in, io.out}) {
      for (size_t i = 0; i < aclmdlGetDatasetNumBuffers(ds); ++i) aclDestroyDataBuffer(aclmdlGetDatasetBuffer(ds, i));
      aclmdlDestroyDataset(ds);
    }
    for (void *p : {io.a, io.b, io.c}) execErrors += aclrtFree(p) != 0;
    aclmdlDestroyDesc(io.d);
    execErrors += aclmdlUnload(id) != 0;
  });
  l1.join();
  l2.join();
  stop = true;
  ex.join();
  CHECK(loadErrors == 0 && loadErrors2 == 0 && loads == 15 && loads2 == 15);
  CHECK(execErrors == 0 && execWrong == 0 && execs >= 10);
  size_t free1;
  ACL_OK(aclrtGetMemInfo(ACL_HBM_MEM, &free1, &total));
  CHECK(free1 == free0);
  ACL_OK(aclFinalize());
}

}  // namespace

void concurrency() {
  pipelinesOnTwoDevices();
  resetWhileWaited();
  destroyStreamWhileBusy();
  loadUnloadWhileExecuting();
}
