// The compute thread pool (NPU_FLEET_SIM_THREADS, the calling thread included) that kernels
// split their work over with parallelFor.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "compute.h"
#include "sim_common.h"

namespace sim {

namespace {

class Pool {
 public:
  explicit Pool(int n) : size_(n) {
    for (int i = 1; i < n; ++i) threads_.emplace_back([this] { worker(); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
      stopFlag_ = true;
    }
    cv_.notify_all();
    for (auto &t : threads_) t.join();
  }
  int size() const { return size_; }

  void run(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)> &fn) {
    if (threads_.empty() || n <= grain || !submitMu_.try_lock()) {
      fn(0, n);
      return;
    }
    int64_t chunk = std::max<int64_t>(grain, (n + size_ * 4 - 1) / (size_ * 4));
    {
      std::lock_guard<std::mutex> lk(mu_);
      fn_ = &fn;
      error_ = nullptr;
      next_.store(0);
      end_ = n;
      chunk_ = chunk;
      ++gen_;
    }
    cv_.notify_all();
    drain(fn, n, chunk);
    std::exception_ptr error;
    {
      std::unique_lock<std::mutex> lk(mu_);
      doneCv_.wait(lk, [&] { return busy_ == 0; });
      fn_ = nullptr;
      error.swap(error_);
    }
    submitMu_.unlock();
    if (error) std::rethrow_exception(error);  // the first chunk's failure, on the caller's thread
  }

 private:
  // Runs chunks until none is left. A chunk that throws (e.g. a kernel's scratch allocation
  // failing) ends the whole parallelFor: the remaining chunks are skipped and run() rethrows
  // the first exception once every thread is out, so it never escapes a pool thread
  // (std::terminate) nor leaves run() while workers still use fn.
  void drain(const std::function<void(int64_t, int64_t)> &fn, int64_t end, int64_t chunk) {
    for (;;) {
      int64_t b = next_.fetch_add(chunk);
      if (b >= end) return;
      try {
        fn(b, std::min(b + chunk, end));
      } catch (...) {
        next_.store(end);
        std::lock_guard<std::mutex> lk(mu_);
        if (!error_) error_ = std::current_exception();
        return;
      }
    }
  }
  void worker() {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lk(mu_);
    for (;;) {
      if (!stop_ && gen_.load() == seen) {
        // Spin briefly before sleeping: back-to-back GEMMs of one execution arrive within
        // microseconds, and a condition-variable wake-up costs tens of them.
        lk.unlock();
        const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
        while (gen_.load(std::memory_order_acquire) == seen && !stopFlag_.load(std::memory_order_relaxed) &&
               std::chrono::steady_clock::now() < until) {
#ifdef ACLSIM_X86
          _mm_pause();
#endif
        }
        lk.lock();
      }
      cv_.wait(lk, [&] { return stop_ || gen_.load() != seen; });
      if (stop_) return;
      seen = gen_;
      if (!fn_) continue;
      const auto *fn = fn_;
      int64_t end = end_, chunk = chunk_;
      ++busy_;
      lk.unlock();
      drain(*fn, end, chunk);
      lk.lock();
      if (--busy_ == 0) doneCv_.notify_all();
    }
  }

  int size_;
  std::vector<std::thread> threads_;
  std::mutex mu_, submitMu_;
  std::condition_variable cv_, doneCv_;
  const std::function<void(int64_t, int64_t)> *fn_ = nullptr;
  std::exception_ptr error_;  // guarded by mu_
  std::atomic<int64_t> next_{0};
  int64_t end_ = 0, chunk_ = 1;
  std::atomic<uint64_t> gen_{0};
  int busy_ = 0;
  bool stop_ = false;
  std::atomic<bool> stopFlag_{false};
};

std::mutex &g_poolMu = *new std::mutex;
std::shared_ptr<Pool> &g_pool = *new std::shared_ptr<Pool>;

std::shared_ptr<Pool> pool() {
  std::lock_guard<std::mutex> lk(g_poolMu);
  if (!g_pool) {
    int n = int(std::thread::hardware_concurrency());
    if (const char *e = std::getenv("NPU_FLEET_SIM_THREADS")) {
      char *endp = nullptr;
      long v = std::strtol(e, &endp, 10);
      if (endp != e && *endp == 0 && v >= 1 && v <= 1024) n = int(v);
    }
    g_pool = std::make_shared<Pool>(std::max(1, n));
  }
  return g_pool;
}

}  // namespace

void parallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)> &fn) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  if (n <= grain) {
    fn(0, n);
    return;
  }
  pool()->run(n, grain, fn);
}

int poolSize() { return pool()->size(); }

void shutdownPool() {
  std::shared_ptr<Pool> p;
  {
    std::lock_guard<std::mutex> lk(g_poolMu);
    p.swap(g_pool);
  }
  p.reset();
}

}  // namespace sim
