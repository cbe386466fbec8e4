package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/config"
)

// TestOneDataDirDefault: without AGENTBOX_DATA_DIR, serve's settings and
// doctor's checks name the same data dir, run's (config.DefaultDataDir):
// /var/lib/agentbox as root, not a directory of the working directory.
func TestOneDataDirDefault(t *testing.T) {
	t.Setenv("AGENTBOX_DATA_DIR", "")
	os.Unsetenv("AGENTBOX_DATA_DIR")
	want := "/var/lib/agentbox"
	if os.Geteuid() != 0 {
		cache, err := os.UserCacheDir()
		if err != nil {
			t.Skip(err)
		}
		want = filepath.Join(cache, "agentbox")
	}
	if got := config.DefaultDataDir(); got != want {
		t.Errorf("DefaultDataDir = %q, want %q", got, want)
	}
	cfg, err := config.Load("", os.Environ(), map[string]string{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.DataDir != want {
		t.Errorf("serve's AGENTBOX_DATA_DIR default = %q, want %q", cfg.DataDir, want)
	}
	r := runAll(t, "--json", "doctor", "--set", "NETWORK=off")
	var out struct {
		Checks []struct{ Name, Detail string } `json:"checks"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("%v: %s", err, r.stdout)
	}
	found := false
	for _, c := range out.Checks {
		if c.Name == "data-dir" {
			found = true
			if !strings.HasPrefix(c.Detail, want+" (") && !strings.Contains(c.Detail, want+"'s parents") && !strings.HasPrefix(c.Detail, want+" does not exist") {
				t.Errorf("doctor's data dir: %q, want %s", c.Detail, want)
			}
		}
	}
	if !found {
		t.Errorf("no data-dir check: %s", r.stdout)
	}
}
