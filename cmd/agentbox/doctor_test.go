package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// doctorDataDir is a data dir sandboxes could pass through.
func doctorDataDir(t *testing.T) string {
	dir := t.TempDir()
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// doctorLine returns the output line of check name.
func doctorLine(out, name string) string {
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[1] == name {
			return line
		}
	}
	return ""
}

func TestDoctorMissingAgent(t *testing.T) {
	dir := doctorDataDir(t)
	args := []string{"doctor", "--data-dir", dir, "--set", "AGENT_PATH=" + filepath.Join(dir, "no-agent"), "--set", "NETWORK=off"}

	r := runAll(t, args...)
	line := doctorLine(r.stdout, "agent")
	if r.code != 1 || !strings.HasPrefix(line, "missing  agent ") || !strings.Contains(line, "no-agent") || !strings.Contains(line, "— fix: set AGENT_PATH") {
		t.Errorf("exit %d, agent line %q\n%s", r.code, line, r.stdout)
	}
	if r.msg != "a required check is missing: agent (the fix is above)" || r.stderr != "" {
		t.Errorf("msg %q stderr %q", r.msg, r.stderr)
	}
	if l := doctorLine(r.stdout, "settings"); !strings.HasPrefix(l, "ok ") || !strings.Contains(l, "flags") {
		t.Errorf("settings line %q", l)
	}
	if l := doctorLine(r.stdout, "nftables"); !strings.HasPrefix(l, "skip ") || !strings.Contains(l, "NETWORK=off") {
		t.Errorf("nftables line %q", l)
	}

	// --json: the same checks as one object on stdout, and nothing else
	// (main prints no message either).
	r = runAll(t, append([]string{"--json"}, args...)...)
	var out struct {
		OK     bool `json:"ok"`
		Checks []struct {
			Name, Status, Detail, Fix string
		} `json:"checks"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("--json stdout: %v\n%s", err, r.stdout)
	}
	if r.code != 1 || r.msg != "" || r.stderr != "" || out.OK {
		t.Errorf("--json: exit %d msg %q stderr %q ok %v", r.code, r.msg, r.stderr, out.OK)
	}
	found := false
	for _, c := range out.Checks {
		if c.Name == "agent" {
			found = c.Status == "missing" && strings.Contains(c.Fix, "AGENT_PATH")
		}
	}
	if !found || out.Checks[0].Name != "settings" {
		t.Errorf("--json checks: %+v", out.Checks)
	}
}

func TestDoctorBadSetting(t *testing.T) {
	r := runAll(t, "doctor", "--data-dir", doctorDataDir(t), "--set", "POOL_SIZE=lots")
	line := doctorLine(r.stdout, "settings")
	if r.code != 1 || !strings.HasPrefix(line, "missing  settings ") || !strings.Contains(line, "POOL_SIZE") || !strings.Contains(line, "--help-settings") {
		t.Errorf("exit %d, settings line %q", r.code, line)
	}
	// The other checks still ran, on the defaults.
	if doctorLine(r.stdout, "kernel") == "" {
		t.Errorf("no kernel line:\n%s", r.stdout)
	}
	if r = runAll(t, "doctor", "--set", "NOVALUE"); r.code != 2 {
		t.Errorf("--set without =: exit %d %q", r.code, r.msg)
	}
}

// TestDoctorThisHost: on this host, as root, with an agent binary in
// place, nothing is missing and the exit status is 0.
func TestDoctorThisHost(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a rootless daemon's host differs")
	}
	dir := doctorDataDir(t)
	agent := filepath.Join(dir, "agentbox-agent")
	if err := os.WriteFile(agent, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r := runAll(t, "doctor", "--data-dir", dir, "--set", "AGENT_PATH="+agent)
	if r.code != 0 || r.msg != "" {
		t.Errorf("exit %d msg %q\n%s", r.code, r.msg, r.stdout)
	}
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		if f := strings.Fields(line); len(f) < 3 || (f[0] != "ok" && f[0] != "warn" && f[0] != "skip") {
			t.Errorf("line %q", line)
		}
	}
}
