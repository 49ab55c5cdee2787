// Test driver: ./sim_test [--dump DIR] [--bench] [filter]
#include <chrono>
#include <cstring>

#include "harness.h"

void runtimeTests(const char *filter);
void opTests(const char *filter);
void modelTests(const char *filter);
void benchMain();
int exitChildMain();
const char *g_argv0 = nullptr;

int main(int argc, char **argv) {
  g_argv0 = argv[0];
  if (argc > 1 && !std::strcmp(argv[1], "--exit-child")) return exitChildMain();
  const char *filter = nullptr;
  bool bench = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--dump") && i + 1 < argc) setDumpDir(argv[++i]);
    else if (!std::strcmp(argv[i], "--bench")) bench = true;
    else filter = argv[i];
  }
  if (bench) {
    benchMain();
    return 0;
  }
  const auto t0 = std::chrono::steady_clock::now();
  runtimeTests(filter);
  opTests(filter);
  modelTests(filter);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%d checks, %d failures (%.1f s)\n", g_checks, g_failures, s);
  return g_failures ? 1 : 0;
}
