#!/usr/bin/env bash
# Builds Helm (tools/helm: helm.sh/helm/v3 at a pinned version, from the Go
# module proxy) into $AGENTBOX_TEST_CACHE/helm/<version>-<hash>/helm, outside
# the checkout, for the chart's test (test/packaging TestHelmChart) and for
# `helm` by hand. The directory is keyed by the version and a hash of the
# module's go.mod and go.sum, so a bump builds anew and an unchanged pin
# takes no time.
#
#   scripts/helm-tool.sh          build if needed, print the binary's path
#   scripts/helm-tool.sh --path   print the path only
#
# The first build takes a few minutes on 2 cores. Built without Helm's
# release ldflags, it assumes Kubernetes 1.20 when no cluster is asked:
# `helm template` and `helm lint` need --kube-version (the test passes the
# test control plane's).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${AGENTBOX_TEST_CACHE:=${XDG_CACHE_HOME:-$HOME/.cache}/agentbox-test}"
mod=tools/helm
version=$(awk '$1=="helm.sh/helm/v3" && $2 ~ /^v/ {print $2; exit}' $mod/go.mod)
if [[ -z $version ]]; then
  echo "helm-tool.sh: cannot read helm.sh/helm/v3's version from $mod/go.mod" >&2
  exit 1
fi
hash=$(cat $mod/go.mod $mod/go.sum | sha256sum | cut -c1-12)
dir="$AGENTBOX_TEST_CACHE/helm/$version-$hash"
if [[ ${1:-} == --path ]]; then
  echo "$dir/helm"
  exit 0
fi
if [[ -x $dir/helm ]]; then
  echo "$dir/helm"
  exit 0
fi
mkdir -p "$AGENTBOX_TEST_CACHE/helm"
# One build at a time (checkouts may share the cache).
exec 9>"$AGENTBOX_TEST_CACHE/helm/.lock"
flock 9
if [[ -x $dir/helm ]]; then
  echo "$dir/helm"
  exit 0
fi
tmp=$(mktemp -d "$AGENTBOX_TEST_CACHE/helm/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "helm-tool.sh: building helm $version (a few minutes the first time)" >&2
# Helm's version stamp, so `helm version` reports the pinned release.
(cd $mod && CGO_ENABLED=0 go build -trimpath \
  -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$version" -o "$tmp/helm" helm.sh/helm/v3/cmd/helm)
rm -rf "$dir"
mv "$tmp" "$dir"
trap - EXIT
echo "$dir/helm"
