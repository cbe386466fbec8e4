package dataplane

import "github.com/agentbox/agentbox/internal/settings"

// Settings are the data plane's settings (internal/settings). The daemon
// gives them to Config.
type Settings struct {
	MaxExecOutputBytes int64 `env:"MAX_EXEC_OUTPUT" envDefault:"16M" help:"largest stdout/stderr kept for a buffered exec result (per stream)"`
}

var defaults = settings.Defaults[Settings]()

// DefaultSettings are the settings' defaults (the doors' output limit).
func DefaultSettings() Settings { return defaults }
