#!/usr/bin/env bash
# One-stop set-up for a fresh Debian 12 machine: installs every package refit needs,
# then configures and builds Release with ccache. Quickly a no-op when already done.
# Usage: scripts/setup.sh [build targets...]   (default: everything)
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  libopenblas-dev libhwy-dev nlohmann-json3-dev libpcre2-dev libcli11-dev libfmt-dev
  libdlpack-dev libgtest-dev libgmock-dev libbenchmark-dev
  libopenmpi-dev openmpi-bin libcpp-httplib-dev libgloo-dev
  pybind11-dev python3-dev python3-torch python3-numpy python3-pytest python3-jinja2
  libutf8proc-dev
  clang clang-format libclang-rt-14-dev
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Node.js runs the end-to-end test with the official OpenAI client. Debian's nodejs/npm
# when no node is installed (a NodeSource node already brings its own npm).
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
# The pinned client (tests/e2e/package-lock.json), installed once at set-up, never by tests.
if [ ! -d tests/e2e/node_modules/openai ]; then
  (cd tests/e2e && npm ci --no-audit --no-fund --loglevel=error >&2)
fi

# ccache hashes paths relative to the checkout, so a clone at another path (a CI runner's
# workspace, a second worktree) reuses what was compiled before instead of building cold.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
BUILD_DIR=${REFIT_BUILD_DIR:-build}
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
    -DPython3_EXECUTABLE=/usr/bin/python3 >&2
fi
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build "$BUILD_DIR" -j"$(nproc)" "${targets[@]}" >&2
