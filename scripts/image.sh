#!/usr/bin/env bash
# Builds the daemon's container image for one host (`make image`;
# deploy/docker/Dockerfile, docs/install.md) without a registry:
#
# 1. a Debian root filesystem of the build host's suite with the runtime
#    packages, bootstrapped from the host's apt sources by mmdebstrap
#    (tools/rootfs, the machinery of `agentbox template bootstrap`), cached
#    in CACHE/bootstrap;
# 2. imported into the Docker engine as agentbox-rootfs:SUITE-<hash of the
#    tarball's name> (once);
# 3. the first built-in templates (IMAGE_TEMPLATE_NAMES, default base and
#    code-interpreter) as a seed template store (tools/imagetemplates), taken
#    from the template store IMAGE_TEMPLATES (default CACHE/templates) and
#    built there first when it lacks them (minutes, once), cached in
#    CACHE/image-seed by the templates' digests; the entrypoint unpacks it
#    into an empty data dir, so a new container serves them at once;
# 4. the Dockerfile on it, with the binaries of bin/ (make build).
#
#   scripts/image.sh TAG [CACHE]      prints TAG once built
#
# Needs root (mmdebstrap, the template builds), mmdebstrap, a Debian host
# (its apt sources name Debian), GNU tar and a Docker engine.
set -euo pipefail
cd "$(dirname "$0")/.."
tag=${1:?usage: scripts/image.sh TAG [CACHE]}
cache=${2:-${XDG_CACHE_HOME:-$HOME/.cache}/agentbox}
version=${VERSION:-dev}
# What the daemon runs besides itself: libseccomp (linked), mkfs.ext4 for
# sandbox disks, CA certificates for template pulls, tini as PID 1, curl
# for the health check, mmdebstrap (and its apt) for `agentbox template
# bootstrap`, python3 for the host template's code contexts (sandboxes of
# the host template see this image's /usr).
packages=libseccomp2,e2fsprogs,ca-certificates,tini,curl,mmdebstrap,python3
for b in agentbox agentbox-agent agentbox-init agentbox-shim; do
  [[ -x bin/$b ]] || { echo "image.sh: bin/$b is missing: make build first" >&2; exit 1; }
done
# The suite the binaries were built on: the daemon links the host's glibc
# and libseccomp.
read -r os suite < <(. /etc/os-release && echo "$ID ${VERSION_CODENAME:-}")
if [[ $os != debian || -z ${suite:-} ]]; then
  echo "image.sh: the image is bootstrapped from this host's Debian apt sources; this host is not Debian" >&2
  exit 1
fi
tarball=$(go run ./tools/rootfs -cache "$cache/bootstrap" -image "debian:$suite" -include "$packages")
base="agentbox-rootfs:$suite-$(basename "$tarball" .tar | sed 's/^debian-[a-z]*-//')"
if ! docker image inspect "$base" >/dev/null 2>&1; then
  echo "image.sh: importing $(basename "$tarball") as $base" >&2
  docker import "$tarball" "$base" >/dev/null
fi
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
cp bin/agentbox bin/agentbox-agent bin/agentbox-init bin/agentbox-shim deploy/docker/entrypoint.sh "$ctx/"
# The seed store, by the digests of its templates: an unchanged template
# reuses the seed made of it. Empty IMAGE_TEMPLATE_NAMES: none (the image
# holds the host template alone; templates are built in its volume).
read -r -a names <<<"${IMAGE_TEMPLATE_NAMES-base code-interpreter}"
: >"$ctx/templates.tar.gz"
if ((${#names[@]})); then
  store=${IMAGE_TEMPLATES:-$cache/templates}
  digests=$(go run ./tools/imagetemplates -store "$store" -bin bin/agentbox "${names[@]}")
  seed="$cache/image-seed/$(sha256sum <<<"$digests" | cut -c1-16).tar.gz"
  if [[ ! -s $seed ]]; then
    mkdir -p "$cache/image-seed"
    find "$cache/image-seed" -name '*.tar.gz' -delete # one seed is kept
    go run ./tools/imagetemplates -store "$store" -bin bin/agentbox -o "$seed" "${names[@]}"
  fi
  ln -f "$seed" "$ctx/templates.tar.gz" 2>/dev/null || cp "$seed" "$ctx/templates.tar.gz"
fi
docker build -q -f deploy/docker/Dockerfile --build-arg BASE="$base" --build-arg VERSION="$version" -t "$tag" "$ctx" >/dev/null
echo "$tag"
