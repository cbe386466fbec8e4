#!/usr/bin/env bash
# Runs the whole test suite. Isolation tests need root; as another user they
# skip with a reason. Tests find the agent binary through AGENTBOX_AGENT_PATH
# (set by the Makefile) and build it themselves when it is unset.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${TEST_TIMEOUT:=40m}"
# A real Docker engine, for the test that sandbox networking coexists with
# Docker's firewall rules (skipped when none can start).
./scripts/start-docker.sh
# -p 1: packages that start sandboxes share the host's cgroups, loop devices
# and network; running them one at a time keeps results and cleanup checks
# independent of each other.
go test -p 1 -count=1 -timeout "$TEST_TIMEOUT" ./...
