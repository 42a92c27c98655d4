#!/bin/sh
# CTest entry: installs the pinned openai client (package-lock.json) when missing, then
# runs the end-to-end test against the given refit binary.
set -e
cd "$(dirname "$0")"
if [ ! -d node_modules/openai ]; then npm ci --no-audit --no-fund --loglevel=error; fi
exec node openai_client_test.mjs "$1"
