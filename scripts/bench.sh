#!/usr/bin/env bash
# Benchmarks, as reported in docs/benchmarks.md: Go benchmarks of the native
# backend and `agentbox bench` (native, API, network, and the Docker
# reference when an engine runs).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/start-docker.sh
echo "== go test -bench (internal/backend/native)"
go test -run '^$' -bench . -benchtime "${BENCHTIME:-100x}" ./internal/backend/native/
echo "== go test -bench Templates (test/e2e: image templates against host, through a daemon)"
go test -run '^$' -bench Templates -benchtime "${BENCHTIME_TEMPLATES:-50x}" ./test/e2e/
echo "== go test -bench PauseResumeAPI (test/e2e: pause and resume through a daemon)"
go test -run '^$' -bench PauseResumeAPI -benchtime "${BENCHTIME:-100x}" ./test/e2e/
echo "== agentbox bench"
bin/agentbox bench -n "${BENCH_N:-100}"
echo "== go test -bench Store (internal/store) and StateStoreCreates (test/e2e): bbolt against Redis"
go test -run '^$' -bench Store -benchtime "${BENCHTIME_STORE:-2000x}" ./internal/store/
go test -run '^$' -bench StateStoreCreates -benchtime "${BENCHTIME_CREATES:-40x}" ./test/e2e/
echo "== TestAgentscopeBrowserBench (test/e2e: agentscope browser type, create to first screenshot)"
AGENTBOX_BENCH=1 go test -count=1 -timeout 40m -run 'TestAgentscopeBrowserBench$' -v ./test/e2e/ | grep -A4 'create to first screenshot'
