package manager

import (
	"strconv"
	"strings"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/settings"
)

// Labels a template states its own default resources with: a browser
// needs more memory and threads than the server's defaults, which fit a
// code sandbox. A create's explicit resources win over them.
const (
	LabelMemory = "agentbox.resources.memory" // a size: "2G", "1536M"
	LabelPIDs   = "agentbox.resources.pids"   // processes and threads
)

// templateDefaults are the default resources of a sandbox of t: the
// server's defaults with what t's labels say instead, each clamped to the
// server's maximums (what any caller may ask for in a create, so an
// image's labels grant nothing a caller could not have asked for). A label
// that does not parse is ignored.
func templateDefaults(t sandbox.Template, def, max sandbox.Resources) sandbox.Resources {
	labels := t.Config.Labels
	if v := strings.TrimSpace(labels[LabelMemory]); v != "" {
		if n, err := settings.ParseSize(v); err == nil && n > 0 {
			def.MemoryBytes = clamp(n, max.MemoryBytes)
		}
	}
	if v := strings.TrimSpace(labels[LabelPIDs]); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 8 {
			def.PIDs = clamp(n, max.PIDs)
		}
	}
	return def
}

// clamp returns n, at most limit when limit is set.
func clamp(n, limit int64) int64 {
	if limit > 0 && n > limit {
		return limit
	}
	return n
}
