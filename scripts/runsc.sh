#!/usr/bin/env bash
# Builds gVisor's runsc (tools/runsc: gvisor.dev/gvisor at a pinned
# pseudo-version of its Go branch, from the Go module proxy) into
# $AGENTBOX_TEST_CACHE/runsc/<version>-<hash>/runsc, outside the checkout,
# for the gVisor isolation level's tests and for an operator to install
# (docs/gvisor.md). The directory is keyed by the version and a hash of the
# module's go.mod and go.sum, so a bump builds anew and an unchanged pin takes
# no time. internal/runsctest computes the same key.
#
#   scripts/runsc.sh          build if needed, print the binary's path
#   scripts/runsc.sh --path   print the path only
#
# The first build takes a few minutes on 2 cores (a ~60 MB static binary).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${AGENTBOX_TEST_CACHE:=${XDG_CACHE_HOME:-$HOME/.cache}/agentbox-test}"
mod=tools/runsc
version=$(awk '$1=="gvisor.dev/gvisor" && $2 ~ /^v/ {print $2; exit}' $mod/go.mod)
if [[ -z $version ]]; then
  echo "runsc.sh: cannot read gvisor.dev/gvisor's version from $mod/go.mod" >&2
  exit 1
fi
hash=$(cat $mod/go.mod $mod/go.sum | sha256sum | cut -c1-12)
dir="$AGENTBOX_TEST_CACHE/runsc/$version-$hash"
if [[ ${1:-} == --path ]]; then
  echo "$dir/runsc"
  exit 0
fi
if [[ -x $dir/runsc ]]; then
  echo "$dir/runsc"
  exit 0
fi
mkdir -p "$AGENTBOX_TEST_CACHE/runsc"
# One build at a time (checkouts may share the cache).
exec 9>"$AGENTBOX_TEST_CACHE/runsc/.lock"
flock 9
if [[ -x $dir/runsc ]]; then
  echo "$dir/runsc"
  exit 0
fi
tmp=$(mktemp -d "$AGENTBOX_TEST_CACHE/runsc/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "runsc.sh: building runsc $version (a few minutes the first time)" >&2
# Static, as gVisor ships it: the sandbox re-executes this binary inside
# namespaces where no libc may be reachable.
(cd $mod && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$tmp/runsc" gvisor.dev/gvisor/runsc)
rm -rf "$dir"
mv "$tmp" "$dir"
trap - EXIT
echo "$dir/runsc"
