package daemon

import (
	"testing"

	"github.com/agentbox/agentbox/internal/backend/native"
	"github.com/agentbox/agentbox/internal/config"
)

// The native backend keeps fallbacks of its own for a zero Config field
// (its package cannot read the settings' tags without linking its runtime
// into every reader of the configuration, see config's backends.go): they
// must be the settings' defaults.
func TestNativeDefaultsAreTheSettings(t *testing.T) {
	cfg, err := config.Load("", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Resources != native.DefaultResources {
		t.Errorf("DEFAULT_* resources %+v, native's defaults %+v", cfg.Resources, native.DefaultResources)
	}
	if cfg.NofileSoft != native.DefaultNofileSoft || cfg.NofileHard != native.DefaultNofileHard ||
		cfg.IDBase != native.DefaultIDBase || cfg.IDRanges != native.DefaultIDRanges || cfg.DiskOvercommit != 1 {
		t.Errorf("settings: nofile %d/%d, ids %d+%d, overcommit %v; native: %d/%d, %d+%d, 1", cfg.NofileSoft, cfg.NofileHard,
			cfg.IDBase, cfg.IDRanges, cfg.DiskOvercommit, native.DefaultNofileSoft, native.DefaultNofileHard, native.DefaultIDBase, native.DefaultIDRanges)
	}
}
