#!/usr/bin/env bash
# Benchmarks, as reported in docs/benchmarks.md: Go benchmarks of the native
# backend and `agentbox bench` (native, API, network, and the Docker
# reference when an engine runs).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/start-docker.sh
echo "== go test -bench (internal/backend/native)"
go test -run '^$' -bench . -benchtime "${BENCHTIME:-100x}" ./internal/backend/native/
echo "== agentbox bench"
bin/agentbox bench -n "${BENCH_N:-100}"
