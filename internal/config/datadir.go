package config

import (
	"os"
	"path/filepath"
)

// SystemDataDir is a root daemon's data dir unless AGENTBOX_DATA_DIR says
// otherwise. Not the working directory: sandboxes run as unprivileged host
// ids that must pass through the data dir's parents, which a checkout
// under /root (mode 0700) does not let them, and two commands started in
// different directories would not find each other's state.
const SystemDataDir = "/var/lib/agentbox"

// DefaultDataDir is the data dir of every command (serve, run, doctor,
// make run) when AGENTBOX_DATA_DIR and --data-dir are not set: the system
// one for root; for a rootless user, somewhere that user may write
// (~/.cache/agentbox).
func DefaultDataDir() string {
	if os.Geteuid() != 0 {
		if cache, err := os.UserCacheDir(); err == nil {
			return filepath.Join(cache, "agentbox")
		}
	}
	return SystemDataDir
}
