#!/usr/bin/env bash
# Runs golangci-lint (.golangci.yml) over the tree; `make vet` calls it.
# The linter is built from the Go module proxy at the version pinned here,
# once, into $AGENTBOX_TEST_CACHE/golangci-lint-<version>/ outside the
# checkout (a few minutes on 2 cores the first time, then nothing).
set -euo pipefail
cd "$(dirname "$0")/.."
version=v2.15.0
: "${AGENTBOX_TEST_CACHE:=${XDG_CACHE_HOME:-$HOME/.cache}/agentbox-test}"
dir="$AGENTBOX_TEST_CACHE/golangci-lint-$version"
bin="$dir/golangci-lint"
if [[ ! -x $bin ]]; then
  echo "lint.sh: building golangci-lint $version into $dir (once)" >&2
  mkdir -p "$dir"
  tmp=$(mktemp -d "$dir/.build-XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  # Its own go.mod pins its dependencies; CGO off gives a static binary.
  GOBIN="$tmp" CGO_ENABLED=0 GOFLAGS=-mod=mod go install "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$version"
  mv "$tmp/golangci-lint" "$bin"
fi
# Several checkouts on one machine (worktrees, a second clone) run lint at
# once: wait for another run's lock rather than fail.
exec "$bin" run --allow-parallel-runners "$@" ./...
