#!/bin/sh
# stage-browser.sh DIR: copies templates/browser to DIR (a build context
# outside the checkout) with Playwright's MCP server installed by the
# host's npm from the pinned package-lock.json, so the template build needs
# no registry access of its own (a sandbox's egress may not reach npm where
# the host does). The install is redone only when the lockfile changed.
set -eu
dst=${1:?usage: stage-browser.sh DIR}
src=$(cd "$(dirname "$0")/../templates/browser" && pwd)
mods="$dst/browser-mcp/node_modules"
fresh=no
if [ -d "$mods" ] && cmp -s "$src/browser-mcp/package-lock.json" "$dst/browser-mcp/package-lock.json"; then
	fresh=yes
fi
mkdir -p "$dst"
cp -R "$src/." "$dst/"
if [ "$fresh" = no ]; then
	rm -rf "$mods"
	# The lockfile pins every package; no install scripts (nothing
	# downloads a browser).
	(cd "$dst/browser-mcp" && npm ci --omit=dev --ignore-scripts --no-audit --no-fund --loglevel=error)
fi
