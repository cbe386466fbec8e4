#!/bin/sh
# stage-code-server.sh DIR: copies templates/code-server to DIR (a build
# context outside the checkout) with code-server and VS Code's server
# dependencies downloaded by the host's npm, all pinned (app/package-lock.json
# for code-server, code-server's own npm-shrinkwrap.json files for lib/vscode
# and its extensions), so the template build needs no registry access of its
# own (a sandbox's egress may not reach npm where the host does).
# --ignore-scripts everywhere: nothing is built or downloaded here; the
# Dockerfile compiles the native modules inside the image, against Debian's
# Node.js. The download is redone only when the lockfile changed.
set -eu
dst=${1:?usage: stage-code-server.sh DIR}
src=$(cd "$(dirname "$0")/../templates/code-server" && pwd)
app="$dst/app"
fresh=no
if [ -f "$app/.staged" ] && cmp -s "$src/app/package-lock.json" "$app/package-lock.json"; then
	fresh=yes
fi
mkdir -p "$dst"
if [ "$fresh" = no ]; then
	rm -rf "$app"
fi
cp -R "$src/." "$dst/"
if [ "$fresh" = no ]; then
	npmi() { npm ci --omit=dev --ignore-scripts --no-audit --no-fund --loglevel=error "$@"; }
	(cd "$app" && npmi)
	# What code-server's postinstall.sh would install (with network) at
	# install time: VS Code's server modules and the extensions' shared
	# ones, as that script does (npm install: the shrinkwrap files pin
	# every package, but lack Windows-only optional ones, which npm ci
	# refuses).
	npminst() { npm install --omit=dev --ignore-scripts --legacy-peer-deps --no-audit --no-fund --loglevel=error; }
	(cd "$app/node_modules/code-server/lib/vscode" && npminst)
	(cd "$app/node_modules/code-server/lib/vscode/extensions" && npminst)
	touch "$app/.staged"
fi
