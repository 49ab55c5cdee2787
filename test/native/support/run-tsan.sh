#!/bin/sh
# ThreadSanitizer run of the native tests (not part of npm test: see native/README.md,
# "Sanitizers"). Builds the addon and the simulator with -fsanitize=thread outside the work tree
# (a plain `npm run build:native` deletes build/), then runs the given test files (default:
# test/native and test/integration/device, less the onnxruntime oracle tests: see
# vitest-tsan.config.ts) with GCC's libtsan preloaded into the vitest workers; node itself is not
# instrumented. Child processes the tests spawn inherit the preload. Any race report makes TSan
# end that process with exit code 66, so the test (or the vitest worker) fails. Needs g++ and
# libtsan2 (Debian: comes with g++).
#   sh test/native/support/run-tsan.sh [vitest args / test files]
# In reports from node processes the addon's frames may print as (npu_fleet.node+0xOFFSET):
#   addr2line -f -C -e "$TMPDIR/npu-fleet-tsan/build/Debug/npu_fleet.node" 0xOFFSET
set -eu
cd "$(dirname "$0")/../../.."
root="$PWD"
libtsan="$(gcc -print-file-name=libtsan.so)"
if [ ! -e "$libtsan" ]; then
  echo "GCC's libtsan.so not found (Debian/Ubuntu: apt-get install libtsan2 g++)" >&2
  exit 1
fi
dir="${NPU_FLEET_TSAN_DIR:-${TMPDIR:-/tmp}/npu-fleet-tsan}"
mkdir -p "$dir"
ln -sfn "$root/native" "$dir/native"
ln -sfn "$root/node_modules" "$dir/node_modules"
cp "$root/binding.gyp" "$dir/binding.gyp"
nodedir="$(node -p "const p=require('path').resolve(process.execPath,'../..');require('fs').existsSync(p+'/include/node/common.gypi')?'--nodedir='+p:''")"
flags='-fsanitize=thread -fno-omit-frame-pointer -g'
# -Bsymbolic: node exports libstdc++ template instantiations (std::shared_ptr's refcounting among
# them) that would otherwise bind before the addon's own instrumented copies; TSan cannot see
# atomics inside node, so every shared_ptr handoff between threads would look like a race.
ldflags='-fsanitize=thread -Wl,-Bsymbolic'
CFLAGS="$flags" CXXFLAGS="$flags" LDFLAGS="$ldflags" npx node-gyp -C "$dir" configure --debug $nodedir >/dev/null 2>&1
CFLAGS="$flags" CXXFLAGS="$flags" LDFLAGS="$ldflags" npx node-gyp -C "$dir" build --debug -j 2 $nodedir >/dev/null 2>&1 || {
  echo "TSan build failed: rerun npx node-gyp -C $dir build --debug to see why" >&2
  exit 1
}
# Preloaded into the vitest workers only (vitest-tsan.config.ts): the vitest main process never
# loads the addon, and node under TSan now and then crashes in V8 code TSan cannot see into.
export NPU_FLEET_TSAN_PRELOAD="$libtsan"
export TSAN_OPTIONS="suppressions=$root/native/src/tsan.supp external_symbolizer_path=$(command -v llvm-symbolizer || true) halt_on_error=1 second_deadlock_stack=1 history_size=4 ${TSAN_OPTIONS:-}"
export NPU_FLEET_TSAN=1
export NPU_FLEET_ADDON="$dir/build/Debug/npu_fleet.node"
export NPU_FLEET_SOAK_EXECUTIONS="${NPU_FLEET_SOAK_EXECUTIONS:-2000}"
if [ "$#" -eq 0 ]; then set -- test/native test/integration/device; fi
exec npx vitest run --config test/native/support/vitest-tsan.config.ts "$@"
