#!/bin/sh
# npm run test:asan: the native tests against the AddressSanitizer/LeakSanitizer build in
# build/Debug (npm run build:asan). Needs GCC's ASan runtime (Debian: libasan8, comes with g++).
set -eu
cd "$(dirname "$0")/../../.."
if [ ! -f build/Debug/npu_fleet.node ] || [ ! -f build/Debug/libacl_sim.so ]; then
  echo "build/Debug has no sanitizer build: run \`npm run build:asan\` first" >&2
  exit 1
fi
libasan="$(gcc -print-file-name=libasan.so)"
if [ ! -e "$libasan" ]; then
  echo "GCC's libasan.so not found (Debian/Ubuntu: apt-get install libasan8 g++)" >&2
  exit 1
fi
export LD_PRELOAD="$libasan"
# malloc_context_size keeps leak stacks short, so lsan.supp only matches frames next to the
# allocation (node/V8 internals), never npu-fleet code further up the stack.
export ASAN_OPTIONS="detect_leaks=1:malloc_context_size=6:abort_on_error=0:halt_on_error=1"
export LSAN_OPTIONS="suppressions=$PWD/native/src/lsan.supp:print_suppressions=0"
export NPU_FLEET_ASAN=1
export NPU_FLEET_ADDON="$PWD/build/Debug/npu_fleet.node"
export NPU_FLEET_SOAK_EXECUTIONS="${NPU_FLEET_SOAK_EXECUTIONS:-2000}"
exec npx vitest run --config test/native/vitest.config.ts "$@"
