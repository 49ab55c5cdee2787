// Runtime tests: init, devices, contexts, memory accounting, streams, events, callbacks.
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "harness.h"

namespace {

using Clock = std::chrono::steady_clock;
double msSince(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

void resetEnv() {
  for (const char *k : {"NPU_FLEET_SIM_DEVICES", "NPU_FLEET_SIM_DEVICE_MEMORY_BYTES", "NPU_FLEET_SIM_PROFILE",
                        "NPU_FLEET_SIM_FAULTS", "NPU_FLEET_SIM_STRICT_PINNED"}) {
    setEnv(k, nullptr);
  }
}

void testInitFinalize() {
  resetEnv();
  CHECK_CODE(aclrtSetDevice(0), ACL_ERROR_UNINITIALIZE);
  CHECK(aclGetRecentErrMsg() != nullptr);
  CHECK(aclGetRecentErrMsg() == nullptr);  // get-and-clear
  ACL_OK(aclInit(nullptr));
  CHECK_CODE(aclInit(nullptr), ACL_ERROR_REPEAT_INITIALIZE);
  uint32_t n = 0;
  ACL_OK(aclrtGetDeviceCount(&n));
  CHECK(n == 2);
  ACL_OK(aclFinalize());
  CHECK_CODE(aclFinalize(), ACL_ERROR_REPEAT_FINALIZE);
  CHECK_CODE(aclInit("/nonexistent/acl.json"), ACL_ERROR_INVALID_FILE);

  setEnv("NPU_FLEET_SIM_DEVICES", "3");
  ACL_OK(aclInit(nullptr));
  ACL_OK(aclrtGetDeviceCount(&n));
  CHECK(n == 3);
  ACL_OK(aclFinalize());

  const char *bad[][2] = {{"NPU_FLEET_SIM_DEVICES", "zero"},
                          {"NPU_FLEET_SIM_DEVICE_MEMORY_BYTES", "-5"},
                          {"NPU_FLEET_SIM_PROFILE", "base=2xs"},
                          {"NPU_FLEET_SIM_PROFILE", "speed=3ms"},
                          {"NPU_FLEET_SIM_FAULTS", "explode@3"},
                          {"NPU_FLEET_SIM_FAULTS", "fail@0"},
                          {"NPU_FLEET_SIM_FAULTS", "slow@2"},
                          {"NPU_FLEET_SIM_FAULTS", "dev7:fail@1"},
                          {"NPU_FLEET_SIM_FAULTS", "hang@1:forever"},
                          {"NPU_FLEET_SIM_FAULTS", "hang@value=abc:1s"},
                          {"NPU_FLEET_SIM_FAULTS", "crash@value=5:1s"},
                          {"NPU_FLEET_SIM_FAULTS", "nosyncwait@3"},
                          {"NPU_FLEET_SIM_FAULTS", "nosyncwait:1s"},
                          {"NPU_FLEET_SIM_FAULTS", "dev7:nosyncwait"},
                          {"NPU_FLEET_SIM_FAULTS", "curdimsatrun@1"},
                          {"NPU_FLEET_SIM_FAULTS", "dev1:curdimsatrun:2s"}};
  for (auto &kv : bad) {
    resetEnv();
    setEnv(kv[0], kv[1]);
    CHECK_CODE(aclInit(nullptr), ACL_ERROR_INVALID_PARAM);
    const char *m = aclGetRecentErrMsg();
    CHECK(m && std::strstr(m, kv[0]));
  }
  resetEnv();
  setEnv("NPU_FLEET_SIM_FAULTS",
         "fail@3; dev1:hang@5:2000ms, slow@2:x10,slow@4-6:500ms,fail@9+,crash@value=5, dev0:nosyncwait, dev1:curdimsatrun");
  setEnv("NPU_FLEET_SIM_PROFILE", "base=2ms,perItem=250us");
  setEnv("NPU_FLEET_SIM_DEVICE_MEMORY_BYTES", "512MiB");
  ACL_OK(aclInit(nullptr));
  ACL_OK(aclFinalize());
  resetEnv();
}

void testDevicesAndContexts() {
  resetEnv();
  ACL_OK(aclInit(nullptr));
  CHECK_CODE(aclrtSetDevice(2), ACL_ERROR_RT_INVALID_DEVICEID);
  const char *m = aclGetRecentErrMsg();
  CHECK(m && std::strstr(m, "device id 2"));
  CHECK_CODE(aclrtSetDevice(-1), ACL_ERROR_RT_INVALID_DEVICEID);
  int32_t dev = -1;
  CHECK_CODE(aclrtGetDevice(&dev), ACL_ERROR_RT_CONTEXT_NULL);
  void *p = nullptr;
  CHECK_CODE(aclrtMalloc(&p, 64, ACL_MEM_MALLOC_HUGE_FIRST), ACL_ERROR_RT_CONTEXT_NULL);
  ACL_OK(aclrtSetDevice(1));
  ACL_OK(aclrtGetDevice(&dev));
  CHECK(dev == 1);
  aclrtContext def = nullptr, ctx = nullptr, cur = nullptr;
  ACL_OK(aclrtGetCurrentContext(&def));
  CHECK_CODE(aclrtDestroyContext(def), ACL_ERROR_INVALID_PARAM);
  aclGetRecentErrMsg();
  ACL_OK(aclrtCreateContext(&ctx, 0));
  ACL_OK(aclrtGetCurrentContext(&cur));
  CHECK(cur == ctx);
  ACL_OK(aclrtGetDevice(&dev));
  CHECK(dev == 0);
  // Context is per thread: another thread has none until it sets one.
  std::thread t([&] {
    int32_t d = -1;
    CHECK_CODE(aclrtGetDevice(&d), ACL_ERROR_RT_CONTEXT_NULL);
    CHECK(aclGetRecentErrMsg() != nullptr);
    ACL_OK(aclrtSetCurrentContext(ctx));
    ACL_OK(aclrtGetDevice(&d));
    CHECK(d == 0);
  });
  t.join();
  CHECK(aclGetRecentErrMsg() == nullptr);  // the other thread's message is not ours
  ACL_OK(aclrtSetCurrentContext(def));
  ACL_OK(aclrtDestroyContext(ctx));
  CHECK_CODE(aclrtSetCurrentContext(ctx), ACL_ERROR_INVALID_PARAM);
  ACL_OK(aclrtResetDevice(1));
  CHECK_CODE(aclrtGetDevice(&dev), ACL_ERROR_RT_CONTEXT_NULL);  // its default context is gone
  ACL_OK(aclFinalize());
}

void testMemory() {
  resetEnv();
  setEnv("NPU_FLEET_SIM_DEVICE_MEMORY_BYTES", "1048576");
  ACL_OK(aclInit(nullptr));
  ACL_OK(aclrtSetDevice(0));
  size_t freeB = 0, total = 0;
  ACL_OK(aclrtGetMemInfo(ACL_HBM_MEM, &freeB, &total));
  CHECK(total == 1048576 && freeB == total);
  void *a = nullptr, *b = nullptr;
  ACL_OK(aclrtMalloc(&a, 512 * 1024, ACL_MEM_MALLOC_HUGE_FIRST));
  CHECK((reinterpret_cast<uintptr_t>(a) & 63) == 0);
  ACL_OK(aclrtGetMemInfo(ACL_HBM_MEM, &freeB, &total));
  CHECK(freeB == total - (512 * 1024 + 32));
  CHECK_CODE(aclrtMalloc(&b, 600 * 1024, ACL_MEM_MALLOC_HUGE_FIRST), ACL_ERROR_RT_MEMORY_ALLOCATION);
  const char *m = aclGetRecentErrMsg();
  CHECK(m && std::strstr(m, "out of memory"));
  CHECK_CODE(aclrtMalloc(&b, 0, ACL_MEM_MALLOC_HUGE_FIRST), ACL_ERROR_INVALID_PARAM);
  // Devices account separately.
  ACL_OK(aclrtSetDevice(1));
  ACL_OK(aclrtMalloc(&b, 600 * 1024, ACL_MEM_MALLOC_HUGE_FIRST));
  ACL_OK(aclrtFree(b));
  ACL_OK(aclrtSetDevice(0));
  ACL_OK(aclrtMemset(a, 512 * 1024, 7, 512 * 1024));
  CHECK(static_cast<unsigned char *>(a)[1000] == 7);
  CHECK_CODE(aclrtMemset(a, 512 * 1024, 7, 512 * 1024 + 1), ACL_ERROR_INVALID_PARAM);
  char host[16] = {};
  CHECK_CODE(aclrtMemcpy(host, 16, host, 16, ACL_MEMCPY_HOST_TO_DEVICE), ACL_ERROR_INVALID_PARAM);
  CHECK_CODE(aclrtMemcpy(host, 8, a, 16, ACL_MEMCPY_DEVICE_TO_HOST), ACL_ERROR_INVALID_PARAM);
  ACL_OK(aclrtMemcpy(host, 16, a, 16, ACL_MEMCPY_DEFAULT));
  CHECK(host[3] == 7);
  ACL_OK(aclrtFree(a));
  CHECK_CODE(aclrtFree(a), ACL_ERROR_INVALID_PARAM);  // double free is reported, not a crash
  CHECK_CODE(aclrtFree(host), ACL_ERROR_INVALID_PARAM);
  ACL_OK(aclrtGetMemInfo(ACL_HBM_MEM, &freeB, &total));
  CHECK(freeB == total);
  void *h = nullptr;
  ACL_OK(aclrtMallocHost(&h, 100));
  ACL_OK(aclrtGetMemInfo(ACL_HBM_MEM, &freeB, &total));
  CHECK(freeB == total);  // pinned host memory is not device memory
  ACL_OK(aclrtFreeHost(h));
  CHECK_CODE(aclrtFreeHost(h), ACL_ERROR_INVALID_PARAM);
  // Leaked allocations are released by reset / finalize (LeakSanitizer checks).
  ACL_OK(aclrtMalloc(&a, 1000, ACL_MEM_MALLOC_HUGE_FIRST));
  ACL_OK(aclrtMallocHost(&h, 1000));
  ACL_OK(aclrtResetDevice(0));  // set twice above: this only drops a reference
  ACL_OK(aclrtGetMemInfo(ACL_HBM_MEM, &freeB, &total));
  CHECK(freeB < total);
  ACL_OK(aclrtResetDevice(0));
  ACL_OK(aclrtSetDevice(0));
  ACL_OK(aclrtGetMemInfo(ACL_HBM_MEM, &freeB, &total));
  CHECK(freeB == total);
  ACL_OK(aclFinalize());
  resetEnv();
}

std::mutex g_orderMu;
std::vector<int> g_order;
void recordOrder(void *arg) {
  std::lock_guard<std::mutex> lk(g_orderMu);
  g_order.push_back(int(reinterpret_cast<intptr_t>(arg)));
}
void sleepFn(void *arg) { std::this_thread::sleep_for(std::chrono::milliseconds(reinterpret_cast<intptr_t>(arg))); }

void testStreams() {
  resetEnv();
  ACL_OK(aclInit(nullptr));
  ACL_OK(aclrtSetDevice(0));
  aclrtStream s = nullptr;
  ACL_OK(aclrtCreateStream(&s));
  const size_t n = 1 << 20;
  void *h1, *h2, *d1, *d2;
  ACL_OK(aclrtMallocHost(&h1, n));
  ACL_OK(aclrtMallocHost(&h2, n));
  ACL_OK(aclrtMalloc(&d1, n, ACL_MEM_MALLOC_HUGE_FIRST));
  ACL_OK(aclrtMalloc(&d2, n, ACL_MEM_MALLOC_HUGE_FIRST));
  for (size_t i = 0; i < n; ++i) static_cast<unsigned char *>(h1)[i] = static_cast<unsigned char>(i * 7);
  std::memset(h2, 0, n);
  // A slow head task proves the copies run in order behind it, asynchronously.
  ACL_OK(aclrtLaunchHostFunc(s, sleepFn, reinterpret_cast<void *>(intptr_t(50))));
  const auto t0 = Clock::now();
  ACL_OK(aclrtMemcpyAsync(d1, n, h1, n, ACL_MEMCPY_HOST_TO_DEVICE, s));
  ACL_OK(aclrtMemcpyAsync(d2, n, d1, n, ACL_MEMCPY_DEVICE_TO_DEVICE, s));
  ACL_OK(aclrtMemcpyAsync(h2, n, d2, n, ACL_MEMCPY_DEVICE_TO_HOST, s));
  CHECK(msSince(t0) < 40);
  aclrtStreamStatus st;
  ACL_OK(aclrtStreamQuery(s, &st));
  CHECK(st == ACL_STREAM_STATUS_NOT_READY);
  ACL_OK(aclrtSynchronizeStream(s));
  ACL_OK(aclrtStreamQuery(s, &st));
  CHECK(st == ACL_STREAM_STATUS_COMPLETE);
  CHECK(std::memcmp(h1, h2, n) == 0);
  // Strict pinned check: pageable host memory is refused for async copies.
  std::vector<char> pageable(64);
  CHECK_CODE(aclrtMemcpyAsync(d1, n, pageable.data(), 64, ACL_MEMCPY_HOST_TO_DEVICE, s), ACL_ERROR_INVALID_PARAM);
  CHECK_CODE(aclrtMemcpyAsync(h1, n, h2, 64, ACL_MEMCPY_HOST_TO_HOST, s), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
  // Ordering of many tasks.
  g_order.clear();
  for (int i = 0; i < 200; ++i) ACL_OK(aclrtLaunchHostFunc(s, recordOrder, reinterpret_cast<void *>(intptr_t(i))));
  ACL_OK(aclrtSynchronizeStream(s));
  bool inOrder = g_order.size() == 200;
  for (int i = 0; inOrder && i < 200; ++i) inOrder = g_order[size_t(i)] == i;
  CHECK(inOrder);
  // Timeout: the wait ends, the work continues.
  ACL_OK(aclrtLaunchHostFunc(s, sleepFn, reinterpret_cast<void *>(intptr_t(150))));
  const auto t1 = Clock::now();
  CHECK_CODE(aclrtSynchronizeStreamWithTimeout(s, 20), ACL_ERROR_RT_STREAM_SYNC_TIMEOUT);
  CHECK(msSince(t1) < 120);
  CHECK_CODE(aclrtSynchronizeStreamWithTimeout(s, -2), ACL_ERROR_RT_PARAM_INVALID);
  ACL_OK(aclrtSynchronizeStreamWithTimeout(s, -1));
  CHECK(msSince(t1) >= 140);
  // Default stream (nullptr) works too.
  ACL_OK(aclrtMemcpyAsync(d1, n, h1, 16, ACL_MEMCPY_HOST_TO_DEVICE, nullptr));
  ACL_OK(aclrtSynchronizeStream(nullptr));
  // A stream on another device is refused while device 0 is current.
  ACL_OK(aclrtSetDevice(1));
  aclrtStream s1 = nullptr;
  ACL_OK(aclrtCreateStream(&s1));
  ACL_OK(aclrtSetDevice(0));
  CHECK_CODE(aclrtMemcpyAsync(d1, n, h1, 16, ACL_MEMCPY_HOST_TO_DEVICE, s1), ACL_ERROR_RT_STREAM_CONTEXT);
  // Destroying a stream with queued work waits for it.
  ACL_OK(aclrtLaunchHostFunc(s, sleepFn, reinterpret_cast<void *>(intptr_t(30))));
  ACL_OK(aclrtLaunchHostFunc(s, recordOrder, reinterpret_cast<void *>(intptr_t(999))));
  ACL_OK(aclrtDestroyStream(s));
  CHECK(!g_order.empty() && g_order.back() == 999);
  CHECK_CODE(aclrtSynchronizeStream(s), ACL_ERROR_INVALID_PARAM);
  ACL_OK(aclrtFree(d1));
  ACL_OK(aclrtFree(d2));
  ACL_OK(aclrtFreeHost(h1));
  ACL_OK(aclrtFreeHost(h2));
  ACL_OK(aclFinalize());  // releases s1 on device 1
}

void testEvents() {
  resetEnv();
  ACL_OK(aclInit(nullptr));
  ACL_OK(aclrtSetDevice(0));
  aclrtStream s = nullptr, s2 = nullptr;
  ACL_OK(aclrtCreateStream(&s));
  ACL_OK(aclrtCreateStream(&s2));
  aclrtEvent a = nullptr, b = nullptr;
  ACL_OK(aclrtCreateEvent(&a));
  ACL_OK(aclrtCreateEvent(&b));
  ACL_OK(aclrtRecordEvent(a, s));
  ACL_OK(aclrtLaunchHostFunc(s, sleepFn, reinterpret_cast<void *>(intptr_t(60))));
  ACL_OK(aclrtRecordEvent(b, s));
  aclrtEventRecordedStatus rs;
  ACL_OK(aclrtQueryEventStatus(b, &rs));
  CHECK(rs == ACL_EVENT_RECORDED_STATUS_NOT_READY);
  aclrtEventStatus es;
  ACL_OK(aclrtQueryEvent(b, &es));
  CHECK(es == ACL_EVENT_STATUS_NOT_READY);
  // s2 waits for b before its own task.
  g_order.clear();
  ACL_OK(aclrtStreamWaitEvent(s2, b));
  ACL_OK(aclrtLaunchHostFunc(s2, recordOrder, reinterpret_cast<void *>(intptr_t(2))));
  ACL_OK(aclrtLaunchHostFunc(s, recordOrder, reinterpret_cast<void *>(intptr_t(1))));
  CHECK_CODE(aclrtSynchronizeEventWithTimeout(b, 5), ACL_ERROR_RT_EVENT_SYNC_TIMEOUT);
  ACL_OK(aclrtSynchronizeEvent(b));
  ACL_OK(aclrtQueryEventStatus(b, &rs));
  CHECK(rs == ACL_EVENT_RECORDED_STATUS_COMPLETE);
  float ms = 0;
  ACL_OK(aclrtEventElapsedTime(&ms, a, b));
  CHECK(ms >= 55 && ms < 500);
  ACL_OK(aclrtSynchronizeStream(s2));
  ACL_OK(aclrtSynchronizeStream(s));
  CHECK(g_order.size() == 2);
  aclrtEvent c = nullptr;
  ACL_OK(aclrtCreateEvent(&c));
  CHECK_CODE(aclrtEventElapsedTime(&ms, a, c), ACL_ERROR_INVALID_PARAM);
  ACL_OK(aclrtDestroyEvent(a));
  CHECK_CODE(aclrtDestroyEvent(a), ACL_ERROR_INVALID_PARAM);
  ACL_OK(aclrtDestroyEvent(b));
  ACL_OK(aclrtDestroyStream(s));
  ACL_OK(aclrtDestroyStream(s2));
  ACL_OK(aclFinalize());  // c is released here
}

// `[devN:]nosyncwait`: aclrtSynchronizeEventWithTimeout reports ACL_ERROR_RT_FEATURE_NOT_SUPPORT
// on that device (a SoC/driver that exports the symbol without supporting it); every other event
// call, and the other device, work as usual.
void testNoSyncWait() {
  resetEnv();
  setEnv("NPU_FLEET_SIM_FAULTS", "dev1:nosyncwait");
  ACL_OK(aclInit(nullptr));
  aclrtEvent ev[2] = {nullptr, nullptr};
  aclrtStream st[2] = {nullptr, nullptr};
  for (int d = 0; d < 2; ++d) {
    ACL_OK(aclrtSetDevice(d));
    ACL_OK(aclrtCreateStream(&st[d]));
    ACL_OK(aclrtCreateEvent(&ev[d]));
    ACL_OK(aclrtLaunchHostFunc(st[d], sleepFn, reinterpret_cast<void *>(intptr_t(30))));
    ACL_OK(aclrtRecordEvent(ev[d], st[d]));
  }
  // The current context is device 1's; an event of device 0 still answers per its own device.
  CHECK_CODE(aclrtSynchronizeEventWithTimeout(ev[1], 1000), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
  const char *m = aclGetRecentErrMsg();
  CHECK(m && std::strstr(m, "dev1:nosyncwait") && std::strstr(m, "device 1"));
  CHECK_CODE(aclrtSynchronizeEventWithTimeout(ev[1], -1), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
  ACL_OK(aclrtSynchronizeEventWithTimeout(ev[0], 1000));
  ACL_OK(aclrtSynchronizeEvent(ev[1]));
  aclrtEventRecordedStatus rs = ACL_EVENT_RECORDED_STATUS_NOT_READY;
  ACL_OK(aclrtQueryEventStatus(ev[1], &rs));
  CHECK(rs == ACL_EVENT_RECORDED_STATUS_COMPLETE);
  CHECK_CODE(aclrtSynchronizeEventWithTimeout(ev[1], 0), ACL_ERROR_RT_FEATURE_NOT_SUPPORT);
  for (int d = 0; d < 2; ++d) {
    ACL_OK(aclrtSetDevice(d));
    ACL_OK(aclrtDestroyEvent(ev[d]));
    ACL_OK(aclrtDestroyStream(st[d]));
  }
  ACL_OK(aclFinalize());
  resetEnv();
}

std::atomic<uint64_t> g_cbThread{0};
std::atomic<int> g_cbCount{0};
void callbackFn(void *ud) {
  g_cbThread = uint64_t(pthread_self());
  g_cbCount += int(reinterpret_cast<intptr_t>(ud));
}

void testCallbacks() {
  resetEnv();
  ACL_OK(aclInit(nullptr));
  ACL_OK(aclrtSetDevice(0));
  aclrtStream s = nullptr;
  ACL_OK(aclrtCreateStream(&s));
  CHECK_CODE(aclrtLaunchCallback(callbackFn, nullptr, ACL_CALLBACK_BLOCK, s), ACL_ERROR_RT_STREAM_NO_CB_REG);
  CHECK_CODE(aclrtProcessReport(10), ACL_ERROR_RT_THREAD_SUBSCRIBE);
  CHECK_CODE(aclrtProcessReport(0), ACL_ERROR_INVALID_PARAM);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> tid{0};
  std::atomic<int> timeouts{0};
  std::thread reporter([&] {
    tid = uint64_t(pthread_self());
    while (!stop) {
      aclError e = aclrtProcessReport(20);
      if (e == ACL_ERROR_RT_REPORT_TIMEOUT) ++timeouts;
      if (e == ACL_ERROR_RT_THREAD_SUBSCRIBE) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      aclGetRecentErrMsg();
    }
  });
  while (!tid) std::this_thread::yield();
  ACL_OK(aclrtSubscribeReport(tid, s));
  CHECK_CODE(aclrtSubscribeReport(tid + 1, s), ACL_ERROR_RT_STREAM_SUBSCRIBE);
  g_cbCount = 0;
  ACL_OK(aclrtLaunchCallback(callbackFn, reinterpret_cast<void *>(intptr_t(1)), ACL_CALLBACK_BLOCK, s));
  ACL_OK(aclrtLaunchCallback(callbackFn, reinterpret_cast<void *>(intptr_t(10)), ACL_CALLBACK_NO_BLOCK, s));
  ACL_OK(aclrtSynchronizeStream(s));
  const auto t0 = Clock::now();
  while (g_cbCount < 11 && msSince(t0) < 2000) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(g_cbCount == 11);
  CHECK(g_cbThread == tid);  // callbacks run on the subscribed thread
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(timeouts > 0);
  ACL_OK(aclrtUnSubscribeReport(tid, s));
  stop = true;
  reporter.join();
  ACL_OK(aclrtDestroyStream(s));
  ACL_OK(aclFinalize());
}

}  // namespace

void runtimeTests(const char *filter) {
  struct {
    const char *name;
    void (*fn)();
  } tests[] = {{"init", testInitFinalize}, {"devices", testDevicesAndContexts}, {"memory", testMemory},
               {"streams", testStreams},   {"events", testEvents},               {"callbacks", testCallbacks},
               {"nosyncwait", testNoSyncWait}};
  for (auto &t : tests) {
    if (filter && !std::strstr(t.name, filter)) continue;
    std::printf("runtime/%s\n", t.name);
    t.fn();
  }
}
