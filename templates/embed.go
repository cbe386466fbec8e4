// Package templates holds the built-in templates' build contexts
// (README.md), embedded in the daemon so that it can build them itself at
// start (TEMPLATE_AUTO_BUILD) wherever its binary runs.
package templates

import "embed"

// FS holds base/, code-interpreter/, browser/ and desktop/.
//
//go:embed base code-interpreter browser desktop
var FS embed.FS
