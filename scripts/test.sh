#!/usr/bin/env bash
# Runs the whole test suite. Isolation tests need root; as another user they
# skip with a reason. Tests find the agent binary through AGENTBOX_AGENT_PATH
# (set by the Makefile) and build it themselves when it is unset.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${TEST_TIMEOUT:=60m}"
# gVisor's runsc, pinned in tools/runsc, built from the Go module proxy into
# the cache (a few minutes the first time): the gVisor isolation level's
# tests (internal/backend/native TestGVisor*, test/e2e TestGVisor*, and
# internal/backend/docker TestGVisorDocker: start-docker.sh below registers
# it with the engine it starts, so it is built first).
: "${AGENTBOX_TEST_CACHE:=${XDG_CACHE_HOME:-$HOME/.cache}/agentbox-test}"
export AGENTBOX_TEST_CACHE
AGENTBOX_RUNSC=$(./scripts/runsc.sh)
export AGENTBOX_RUNSC
# A real Docker engine, for the Docker backend's tests and the test that
# sandbox networking coexists with Docker's firewall rules.
./scripts/start-docker.sh
# The Docker backend's conformance, security and end-to-end tests run on that
# engine: as root, where start-docker.sh can start one, they must not skip.
if [[ $(id -u) -eq 0 ]] && command -v dockerd >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
  export AGENTBOX_REQUIRE_DOCKER=1
fi
# The unmodified e2b and @e2b/code-interpreter SDKs, from npm, pinned as in
# test/compat/e2b/package.json: the agent's code-interpreter test and the
# E2B SDK suite (TestE2BSDK, which installs them itself when this fails).
# Downloads and builds the tests reuse live in a cache outside the checkout,
# so a second run (or another clone) does not fetch or build them again: the
# SDK, the debian:bookworm bootstrap, and the template store in which
# TestBuiltinTemplates builds templates/ (first run a few minutes, then
# seconds).
: "${AGENTBOX_TEST_CACHE:=${XDG_CACHE_HOME:-$HOME/.cache}/agentbox-test}"
export AGENTBOX_TEST_CACHE
sdk="$AGENTBOX_TEST_CACHE/e2b-sdk"
if command -v npm >/dev/null 2>&1 &&
   npm install --prefix "$sdk" e2b@2.51.0 @e2b/code-interpreter@2.8.0 --no-audit --no-fund --loglevel=error >/dev/null 2>&1; then
  export AGENTBOX_E2B_SDK="$sdk"
else
  echo "test.sh: could not install the E2B SDKs from npm" >&2
fi
# The unmodified Daytona TypeScript SDK, pinned as in
# test/compat/daytona/package.json (TestDaytonaSDK installs it itself when
# this fails).
sdk="$AGENTBOX_TEST_CACHE/daytona-sdk"
if command -v npm >/dev/null 2>&1 &&
   npm install --prefix "$sdk" @daytonaio/sdk@0.218.0 --no-audit --no-fund --loglevel=error >/dev/null 2>&1; then
  export AGENTBOX_DAYTONA_SDK="$sdk"
else
  echo "test.sh: could not install the Daytona SDK from npm" >&2
fi
# The web console's unit tests (vitest, web/console/src/*.test.ts); make
# build installed its pinned npm packages. Its end-to-end test (Chromium
# driven by playwright-core) is test/e2e TestConsole, in go test below.
(cd web/console && npm test --silent)
# The Kubernetes control plane (etcd, kube-apiserver, kube-scheduler, the
# agent-sandbox controller) the kube backend's and `agentbox node`'s tests run
# against, built from tools/k8s into the cache (first run about 10 minutes,
# then seconds). Once built, those tests must not skip.
AGENTBOX_K8S_TOOLS=$(./scripts/k8s-tools.sh)
export AGENTBOX_K8S_TOOLS AGENTBOX_REQUIRE_K8S=1
# Helm, pinned in tools/helm, built from the Go module proxy into the cache
# (a few minutes the first time): the chart's test (test/packaging).
AGENTBOX_HELM=$(./scripts/helm-tool.sh)
export AGENTBOX_HELM AGENTBOX_REQUIRE_HELM=1
# SeaweedFS, pinned in tools/seaweedfs, built from the Go module proxy into the
# cache (about 9 minutes the first time): the S3 server the s3 volume tests
# (test/e2e TestS3Volume*) start on loopback. Once built, they must not skip.
AGENTBOX_SEAWEEDFS=$(./scripts/seaweedfs.sh)
export AGENTBOX_SEAWEEDFS AGENTBOX_REQUIRE_SEAWEEDFS=1
# -p 1: packages that start sandboxes share the host's cgroups, loop devices
# and network; running them one at a time keeps results and cleanup checks
# independent of each other.
go test -p 1 -count=1 -timeout "$TEST_TIMEOUT" ./...
