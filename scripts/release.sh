#!/usr/bin/env bash
# Makes the release tarball of this build (`make release`; docs/install.md)
# in OUT (default dist/, which git ignores):
#
#   agentbox-VERSION-linux-ARCH.tar.gz   bin/ (agentbox, agentbox-kube,
#       agentbox-agent, agentbox-init, agentbox-shim), agentbox.service (for
#       /usr/local/bin), agentbox.env, README.md, install.md, LICENSE when
#       the tree has one
#   agentbox-VERSION-py3-none-any.whl     the Python SDK (make sdk-python)
#   SHA256SUMS                            of both (sha256sum -c SHA256SUMS)
#   goproxy/                              a Go module proxy tree serving
#       github.com/agentbox/agentbox (the Go SDK's module) at VERSION when it
#       is a semver tag, else at HEAD's pseudo-version (tools/goproxy; the
#       committed files): GOPROXY=file://.../goproxy,https://proxy.golang.org
#       go get github.com/agentbox/agentbox/client@THAT (docs/quickstart.md)
#
# The tarball is reproducible: sorted names, owner root, the last commit's
# time on every file, gzip without a name or time stamp.
#
#   scripts/release.sh VERSION [OUT]      prints the tarball's path
#
# GZIP_LEVEL (default 9) trades size for time: the test uses 1.
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:?usage: scripts/release.sh VERSION [OUT]}
out=${2:-dist}
arch=$(go env GOARCH)
name="agentbox-$version-linux-$arch"
bins=(agentbox agentbox-kube agentbox-agent agentbox-init agentbox-shim)
for b in "${bins[@]}"; do
  [[ -x bin/$b ]] || { echo "release.sh: bin/$b is missing: make build first" >&2; exit 1; }
done
mkdir -p "$out"
out=$(cd "$out" && pwd)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/$name/bin"
for b in "${bins[@]}"; do install -m 0755 "bin/$b" "$stage/$name/bin/"; done
sed -e 's|@BINDIR@|/usr/local/bin|g' -e 's|@SYSCONFDIR@|/etc|g' deploy/systemd/agentbox.service > "$stage/$name/agentbox.service"
install -m 0644 deploy/systemd/agentbox.env README.md "$stage/$name/"
install -m 0644 docs/install.md "$stage/$name/install.md"
[[ -f LICENSE ]] && install -m 0644 LICENSE "$stage/$name/"
chmod 0644 "$stage/$name/agentbox.service"
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
tarball="$out/$name.tar.gz"
tar -C "$stage" --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" \
    --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime -cf - "$name" | gzip "-${GZIP_LEVEL:-9}" -n > "$tarball.tmp"
mv "$tarball.tmp" "$tarball"
whl=$(./scripts/sdk-python.sh "$out")
(cd "$out" && sha256sum "$(basename "$tarball")" "$(basename "$whl")" > SHA256SUMS)
goversion=()
[[ $version =~ ^v[0-9]+\.[0-9]+\.[0-9]+ ]] && goversion=(-version "$version")
gomod=$(go run ./tools/goproxy -out "$out/goproxy" "${goversion[@]}")
echo "release.sh: the Go SDK's module at $gomod in $out/goproxy" >&2
echo "$tarball"
