#!/usr/bin/env bash
# Installs what agentbox needs on Debian/Ubuntu, when it is missing:
#
#   install-deps.sh run    what make run needs: to build (cgo with libseccomp,
#                          the static shim, the console) and serve (mkfs.ext4)
#   install-deps.sh [test] that and what the tests need (make test)
#
# As root it installs the absent packages with apt-get; as another user it
# names them and fails. Safe to run again: it only installs absent packages.
# INSTALL_DEPS_NODE=0 leaves Node.js out (a build with the console already
# built, or a test of the apt step without the npm registry).
set -euo pipefail

profile=${1:-test}
case $profile in
  run|test) ;;
  *) echo "install-deps: unknown profile $profile (want run or test)" >&2; exit 2 ;;
esac

need=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
# make run: gcc and libc's static archive (build-essential: the cgo daemon,
# the static shim), pkg-config and libseccomp-dev (the daemon links
# libseccomp), e2fsprogs (mkfs.ext4 formats sandbox disks: serve requires it).
for p in build-essential pkg-config libseccomp-dev e2fsprogs; do
  have_pkg "$p" || need+=("$p")
done
# mmdebstrap (with apt and util-linux's unshare, always there) bootstraps
# debian:SUITE templates from the host's own apt sources. Chromium is the
# browser the web console's end-to-end test drives (playwright-core).
# python3-httpx, -pytest, -pytest-asyncio, -websockets: the Python SDK's suites
# (sdk/python), run with Debian's /usr/bin/python3; -setuptools, -wheel and -pip
# build its wheel offline (make sdk-python) and -venv makes the virtual
# environment it is installed into (docs/python.md); mypy checks its annotations.
test_pkgs=(iproute2 nftables \
         git python3 python3-matplotlib python3-requests ca-certificates curl \
         python3-httpx python3-pytest python3-pytest-asyncio python3-websockets python3-setuptools python3-pip python3-wheel python3-venv mypy \
         docker.io iptables mmdebstrap chromium
# The scale-out tests start a real redis-server (docs/scale-out.md).
         redis-server
# systemd-analyze checks the systemd unit (test/packaging TestSystemdUnit).
         systemd
# The daemon serves noVNC's client (Debian's novnc, /usr/share/novnc) for
# the desktop page of desktop sandboxes (docs/desktop.md, DESKTOP_NOVNC_DIR).
         novnc)
if [[ $profile == test ]]; then
  for p in "${test_pkgs[@]}"; do
    have_pkg "$p" || need+=("$p")
  done
fi

# Node.js and npm build the web console (make build) and drive the official
# E2B SDK in a compatibility test; any installation will do (a
# distribution's or NodeSource's) with Node 20.19 or newer.
node=${INSTALL_DEPS_NODE:-1}
if [[ $node != 0 ]] && ! command -v npm >/dev/null 2>&1; then
  need+=(nodejs npm)
fi

if ((${#need[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "install-deps: missing packages: ${need[*]}" >&2
    echo "install-deps: install them (sudo apt-get install ${need[*]}), or run this as root" >&2
    exit 1
  fi
  echo "install-deps: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# The console's build (vite) needs Node 20.19 or newer; Debian 12's nodejs is
# 18. Then a current Node comes from the npm registry (the same place every
# other front-end package comes from): the node-linux-<arch> package holds the
# official binary, and npm checks its integrity against the registry's
# metadata. It is installed under /usr/local, ahead of /usr/bin in PATH.
NODE_FALLBACK=22.23.3
node_recent() {
  command -v node >/dev/null 2>&1 &&
    node -e 'const [a,b]=process.versions.node.split(".").map(Number); process.exit(a>20||(a===20&&b>=19)?0:1)'
}
if [[ $node != 0 ]] && ! node_recent; then
  case $(uname -m) in
    x86_64) node_arch=x64 ;;
    aarch64) node_arch=arm64 ;;
    *) node_arch= ;;
  esac
  if [[ $(id -u) -ne 0 || -z $node_arch ]]; then
    echo "install-deps: Node.js 20.19 or newer is needed (this is $(node -v 2>/dev/null || echo none)); install Debian 13's nodejs or NodeSource's" >&2
    exit 1
  fi
  echo "install-deps: installing Node.js $NODE_FALLBACK from the npm registry (node-linux-$node_arch)"
  dest=/usr/local/lib/agentbox-node/$NODE_FALLBACK
  if [[ ! -x $dest/bin/node ]]; then
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    (cd "$tmp" && npm pack --silent "node-linux-$node_arch@$NODE_FALLBACK" >/dev/null)
    mkdir -p "$dest"
    tar -xzf "$tmp"/node-linux-*.tgz -C "$dest" --strip-components=1 package/bin/node package/LICENSE
  fi
  ln -sf "$dest/bin/node" /usr/local/bin/node
  hash -r
  node_recent || { echo "install-deps: the Node.js from the npm registry does not run here" >&2; exit 1; }
fi

if ! command -v go >/dev/null 2>&1; then
  echo "install-deps: Go is not installed; install Go 1.26 or newer (https://go.dev/dl/)" >&2
  exit 1
fi
