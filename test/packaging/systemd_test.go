package packaging

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// install runs `make install-files` (what `make install` does after the
// build) into dirs under root: the unit names the binaries where they
// really are, so systemd-analyze can check them.
func install(t *testing.T, root string) (prefix, unit, envFile, state string) {
	t.Helper()
	bins := binDir(t)
	dir := t.TempDir()
	prefix, state = filepath.Join(dir, "usr"), filepath.Join(dir, "var", "lib", "agentbox")
	run(t, repoRoot(t), nil, "make", "-s", "install-files", "BIN="+bins, "PREFIX="+prefix,
		"UNITDIR="+filepath.Join(dir, "unit"), "SYSCONFDIR="+filepath.Join(dir, "etc"), "STATEDIR="+state)
	return prefix, filepath.Join(dir, "unit", "agentbox.service"), filepath.Join(dir, "etc", "agentbox", "agentbox.env"), state
}

// TestSystemdUnit: `make install` lays out the binaries, the unit, the
// settings file and the data dir; systemd-analyze verify accepts the unit
// as installed (no warning either); the unit signals the daemon alone and
// leaves its sandboxes to be reattached; a second install keeps the
// operator's settings; uninstall removes what install added but settings
// and data.
func TestSystemdUnit(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Skip("needs systemd-analyze (apt-get install systemd)")
	}
	root := repoRoot(t)
	prefix, unit, envFile, state := install(t, root)
	for _, b := range []string{"agentbox", "agentbox-kube", "agentbox-agent", "agentbox-init", "agentbox-shim"} {
		fi, err := os.Stat(filepath.Join(prefix, "bin", b))
		if err != nil || fi.Mode().Perm() != 0o755 {
			t.Errorf("%s: %v %v, want an executable of mode 0755", b, fi.Mode(), err)
		}
	}
	if fi, err := os.Stat(state); err != nil || fi.Mode().Perm() != 0o711 {
		t.Errorf("data dir %s: %v, want mode 0711 (sandboxes' ids pass through it)", state, err)
	}
	if fi, err := os.Stat(envFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("settings file %s: %v, want mode 0600 (it may hold API keys)", envFile, err)
	}

	// systemd-analyze prints warnings (an unknown KillMode, say) and still
	// exits 0: any output is a failure.
	cmd := exec.Command("systemd-analyze", "verify", unit)
	out, err := cmd.CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("systemd-analyze verify %s: %v\n%s", unit, err, out)
	}

	data, err := os.ReadFile(unit)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"ExecStart":          filepath.Join(prefix, "bin", "agentbox") + " serve --config " + envFile,
		"KillMode":           "mixed",
		"Restart":            "on-failure",
		"StateDirectory":     "agentbox",
		"StateDirectoryMode": "0711",
		"WorkingDirectory":   "/var/lib/agentbox",
		"TimeoutStopSec":     "150",
		"WantedBy":           "multi-user.target",
	}
	got := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			got[k] = v
		}
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("unit: %s=%q, want %q", k, got[k], v)
		}
	}
	if strings.Contains(string(data), "@") {
		t.Errorf("unit has an unexpanded placeholder:\n%s", data)
	}

	// The settings: every name is one the daemon knows, each commented
	// line shows its built-in default, and the file keeps sandboxes across
	// a restart.
	settings := helpSettings(t, filepath.Join(prefix, "bin", "agentbox"))
	env := readEnvFile(t, envFile)
	if len(env) < 10 {
		t.Fatalf("settings file has %d settings, want the common ones", len(env))
	}
	for _, e := range env {
		def, ok := settings[e.name]
		switch {
		case !ok:
			t.Errorf("%s: %s is not a setting of agentbox serve", envFile, e.name)
		case e.commented && e.value != def:
			t.Errorf("%s: #%s=%s, but its default is %q", envFile, e.name, e.value, def)
		}
	}
	set := map[string]string{}
	for _, e := range env {
		if !e.commented {
			set[e.name] = e.value
		}
	}
	if set["AUTO_CLEANUP"] != "false" || set["AGENTBOX_DATA_DIR"] != "/var/lib/agentbox" {
		t.Errorf("settings file sets %v, want AUTO_CLEANUP=false and AGENTBOX_DATA_DIR=/var/lib/agentbox", set)
	}

	// An upgrade (install again) keeps the operator's settings.
	if err := os.WriteFile(envFile, []byte("BEARER_TOKEN=mine\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	install2 := exec.Command("make", "-s", "install-files", "BIN="+binDir(t), "PREFIX="+prefix,
		"UNITDIR="+filepath.Dir(unit), "SYSCONFDIR="+filepath.Dir(filepath.Dir(envFile)), "STATEDIR="+state)
	install2.Dir = root
	if out, err := install2.CombinedOutput(); err != nil {
		t.Fatalf("install again: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(envFile); string(b) != "BEARER_TOKEN=mine\n" {
		t.Errorf("install overwrote the settings file: %q", b)
	}
	uninstall := exec.Command("make", "-s", "uninstall", "PREFIX="+prefix, "UNITDIR="+filepath.Dir(unit))
	uninstall.Dir = root
	if out, err := uninstall.CombinedOutput(); err != nil {
		t.Fatalf("uninstall: %v\n%s", err, out)
	}
	for _, p := range []string{unit, filepath.Join(prefix, "bin", "agentbox")} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("after uninstall %s: %v, want it gone", p, err)
		}
	}
	for _, p := range []string{envFile, state} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("uninstall removed %s: %v", p, err)
		}
	}
}

// helpSettings maps each setting of `agentbox serve --help-settings` to its
// default.
func helpSettings(t *testing.T, bin string) map[string]string {
	t.Helper()
	out, err := exec.Command(bin, "serve", "--help-settings").CombinedOutput()
	if err != nil {
		t.Fatalf("agentbox serve --help-settings: %v\n%s", err, out)
	}
	re := regexp.MustCompile(`^([A-Z][A-Z0-9_]*)\s+default "((?:[^"\\]|\\.)*)"`)
	m := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if g := re.FindStringSubmatch(line); g != nil {
			m[g[1]] = strings.ReplaceAll(g[2], `\"`, `"`)
		}
	}
	if len(m) < 50 {
		t.Fatalf("agentbox serve --help-settings listed %d settings:\n%s", len(m), out)
	}
	return m
}

type envLine struct {
	name, value string
	commented   bool
}

// readEnvFile returns the NAME=value lines of a settings file, commented
// ones (#NAME=value) included; prose comments are skipped.
func readEnvFile(t *testing.T, path string) []envLine {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	re := regexp.MustCompile(`^(#?)([A-Z][A-Z0-9_]*)=(.*)$`)
	var out []envLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if g := re.FindStringSubmatch(sc.Text()); g != nil {
			out = append(out, envLine{name: g[2], value: g[3], commented: g[1] == "#"})
		}
	}
	return out
}
