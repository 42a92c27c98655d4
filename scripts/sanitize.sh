#!/usr/bin/env bash
# Builds refit with AddressSanitizer + UndefinedBehaviorSanitizer in build-asan and runs the
# unit tests matching a filter under it (default: the checkpoint-reader tests and `refit
# inspect`, which they drive; scripts/test --sanitize runs nearly all of them).
# Usage: scripts/sanitize.sh [gtest filter, default 'Formats*']
set -euo pipefail
cd "$(dirname "$0")/.."
FILTER=${1:-Formats*}
BUILD=build-asan
if [ ! -f "$BUILD/build.ninja" ]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DREFIT_SANITIZE=address,undefined \
    -DREFIT_BENCH=OFF >&2
fi
ninja -C "$BUILD" -j"${JOBS:-2}" refit_tests refit >&2
# handle_sigbus=0: a SIGBUS outside refit's guarded mappings must take the default action, as
# in production, not ASan's report (core/sigbus_guard chains to whatever handler came first).
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1:handle_sigbus=0
export LSAN_OPTIONS=suppressions=$PWD/scripts/lsan_suppressions.txt:print_suppressions=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
"$BUILD/refit_tests" --gtest_filter="$FILTER"
