#!/usr/bin/env bash
# Builds SeaweedFS's weed (tools/seaweedfs: github.com/seaweedfs/seaweedfs at
# a pinned pseudo-version, from the Go module proxy) into
# $AGENTBOX_TEST_CACHE/seaweedfs/<version>-<hash>/weed, outside the checkout:
# the real S3-compatible server the object-storage volume tests start on
# loopback. The directory is keyed by the version and a hash of the module's
# go.mod and go.sum, so a bump builds anew and an unchanged pin takes no time.
#
#   scripts/seaweedfs.sh          build if needed, print the binary's path
#   scripts/seaweedfs.sh --path   print the path only
#
# The first build takes several minutes on 2 cores (a ~150 MB binary).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${AGENTBOX_TEST_CACHE:=${XDG_CACHE_HOME:-$HOME/.cache}/agentbox-test}"
mod=tools/seaweedfs
version=$(awk '$1=="github.com/seaweedfs/seaweedfs" && $2 ~ /^v/ {print $2; exit}' $mod/go.mod)
if [[ -z $version ]]; then
  echo "seaweedfs.sh: cannot read seaweedfs's version from $mod/go.mod" >&2
  exit 1
fi
hash=$(cat $mod/go.mod $mod/go.sum | sha256sum | cut -c1-12)
dir="$AGENTBOX_TEST_CACHE/seaweedfs/$version-$hash"
if [[ ${1:-} == --path ]]; then
  echo "$dir/weed"
  exit 0
fi
if [[ -x $dir/weed ]]; then
  echo "$dir/weed"
  exit 0
fi
mkdir -p "$AGENTBOX_TEST_CACHE/seaweedfs"
# One build at a time (checkouts may share the cache).
exec 9>"$AGENTBOX_TEST_CACHE/seaweedfs/.lock"
flock 9
if [[ -x $dir/weed ]]; then
  echo "$dir/weed"
  exit 0
fi
tmp=$(mktemp -d "$AGENTBOX_TEST_CACHE/seaweedfs/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "seaweedfs.sh: building weed $version (several minutes the first time)" >&2
(cd $mod && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$tmp/weed" github.com/seaweedfs/seaweedfs/weed)
rm -rf "$dir"
mv "$tmp" "$dir"
trap - EXIT
echo "$dir/weed"
