#!/usr/bin/env bash
# Builds the Kubernetes control plane the kube tests run against — etcd,
# kube-apiserver and kube-scheduler (tools/k8s/kubernetes) and the
# agent-sandbox controller with its CRDs (tools/k8s/agent-sandbox) — and the
# test cluster's real node — kubelet (tools/k8s/kubernetes), containerd v2
# with its runc shim and ctr, runc, the CNI plugins and a pause binary
# (tools/k8s/node) — into
# $AGENTBOX_TEST_CACHE/k8s-tools/<versions>-<hash>/, outside the checkout.
# The directory is keyed by the pinned versions and a hash of the tools
# modules' go.mod and go.sum, so a bump builds anew and an unchanged pin
# takes seconds. internal/kubetest computes the same key (ToolsDir).
#
#   scripts/k8s-tools.sh            build if needed, print the directory
#   scripts/k8s-tools.sh --dir      print the directory only
#
# The first build takes about 10 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
: "${AGENTBOX_TEST_CACHE:=${XDG_CACHE_HOME:-$HOME/.cache}/agentbox-test}"

kmod=tools/k8s/kubernetes
amod=tools/k8s/agent-sandbox
nmod=tools/k8s/node
# The version a go.mod requires of a module ("require mod vX" or in a block).
modver() { awk -v m="$2" '$1==m && $2 ~ /^v/ {print $2; exit} $1=="require" && $2==m {print $3; exit}' "$1/go.mod"; }
k8s=$(modver $kmod k8s.io/kubernetes)
etcd=$(modver $kmod go.etcd.io/etcd/server/v3)
sandbox=$(modver $amod sigs.k8s.io/agent-sandbox)
containerd=$(modver $nmod github.com/containerd/containerd/v2)
if [[ -z $k8s || -z $etcd || -z $sandbox || -z $containerd ]]; then
  echo "k8s-tools.sh: cannot read the pinned versions from $kmod/go.mod, $amod/go.mod and $nmod/go.mod" >&2
  exit 1
fi
hash=$(cat $kmod/go.mod $kmod/go.sum $amod/go.mod $amod/go.sum $nmod/go.mod $nmod/go.sum $nmod/pause/main.go | sha256sum | cut -c1-12)
dir="$AGENTBOX_TEST_CACHE/k8s-tools/kubernetes-$k8s-etcd-$etcd-agent-sandbox-$sandbox-containerd-$containerd-$hash"

if [[ ${1:-} == --dir ]]; then
  echo "$dir"
  exit 0
fi

tools=(etcd kube-apiserver kube-scheduler agent-sandbox-controller kubelet
  containerd containerd-shim-runc-v2 ctr runc pause cni/bridge cni/host-local cni/loopback)
complete() {
  local t
  for t in "${tools[@]}"; do [[ -x $dir/$t ]] || return 1; done
  [[ -d $dir/crds ]]
}
if complete; then
  echo "$dir"
  exit 0
fi

mkdir -p "$AGENTBOX_TEST_CACHE/k8s-tools"
# One build at a time (two checkouts may share the cache); the second waits
# and then finds the tools built.
exec 9>"$AGENTBOX_TEST_CACHE/k8s-tools/.lock"
flock 9
if complete; then
  echo "$dir"
  exit 0
fi

tmp=$(mktemp -d "$AGENTBOX_TEST_CACHE/k8s-tools/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "k8s-tools.sh: building kubernetes $k8s, etcd $etcd, agent-sandbox $sandbox and containerd $containerd (about 15 minutes the first time)" >&2
minor=${k8s#v1.}; minor=${minor%%.*}
vpkg=k8s.io/component-base/version
# -trimpath and no debug info: smaller, faster links; the version stamps make
# /version report the pinned release instead of v0.0.0-master.
(cd $kmod && CGO_ENABLED=0 go build -trimpath \
  -ldflags "-s -w -X $vpkg.gitVersion=$k8s -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=$minor" \
  -o "$tmp/" go.etcd.io/etcd/server/v3 k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet)
# go names the binary of .../server/v3 after "server".
mv "$tmp/server" "$tmp/etcd"
(cd $amod && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$tmp/" sigs.k8s.io/agent-sandbox/cmd/agent-sandbox-controller)
# The node's runtime, static. The build tags leave out the snapshotters
# that need cgo or kernel parts the tests never use (btrfs, devmapper,
# zfs): the node runs overlayfs.
cpkg=github.com/containerd/containerd/v2
(cd $nmod && CGO_ENABLED=0 go build -trimpath -tags "no_btrfs no_devmapper no_zfs" \
  -ldflags "-s -w -X $cpkg/version.Version=$containerd" \
  -o "$tmp/" $cpkg/cmd/containerd $cpkg/cmd/containerd-shim-runc-v2 $cpkg/cmd/ctr ./pause)
# runc's nsenter is C, and seccomp filters need libseccomp (libseccomp-dev
# to build, libseccomp2 to run): the one tool built with cgo.
runc=$(modver $nmod github.com/opencontainers/runc)
(cd $nmod && CGO_ENABLED=1 go build -trimpath -tags seccomp -ldflags "-s -w -X main.version=$runc" -o "$tmp/" github.com/opencontainers/runc)
mkdir -p "$tmp/cni"
(cd $nmod && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$tmp/cni/" \
  github.com/containernetworking/plugins/plugins/main/bridge \
  github.com/containernetworking/plugins/plugins/ipam/host-local \
  github.com/containernetworking/plugins/plugins/main/loopback)
# The CRDs of the same pinned module, which the harness applies.
src=$(cd $amod && go list -m -f '{{.Dir}}' sigs.k8s.io/agent-sandbox)
mkdir -p "$tmp/crds"
cp "$src"/k8s/crds/*.yaml "$tmp/crds/"
chmod -R u+w "$tmp"
rm -rf "$dir"
mv "$tmp" "$dir"
trap - EXIT
echo "$dir"
