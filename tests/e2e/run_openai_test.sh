#!/bin/sh
# CTest entry: the pinned openai client (package-lock.json) is installed by scripts/setup.sh;
# this runs the end-to-end test against the given refit binary.
set -e
cd "$(dirname "$0")"
if [ ! -d node_modules/openai ]; then echo "tests/e2e: run scripts/setup.sh first (installs the pinned openai client)" >&2; exit 1; fi
exec node openai_client_test.mjs "$1"
