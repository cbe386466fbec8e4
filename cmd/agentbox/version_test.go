package main

import (
	"encoding/json"
	"runtime"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/daemon"
)

func TestVersion(t *testing.T) {
	r := runAll(t, "version")
	for _, want := range []string{"agentbox dev\n", "  commit    ", "  built     unknown\n", "  go        " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + "\n", "  backends  native, docker"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("no %q in\n%s", want, r.stdout)
		}
	}
	r = runAll(t, "--json", "version")
	var b struct {
		Version, Commit, Date string
		GoVersion             string   `json:"go_version"`
		Backends              []string `json:"backends"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &b); err != nil {
		t.Fatalf("version --json: %v\n%s", err, r.stdout)
	}
	want := []string{"native", "docker"}
	if daemon.KubeLinked {
		want = append(want, "kube")
	}
	if b.Version != "dev" || b.GoVersion != runtime.Version() || strings.Join(b.Backends, ",") != strings.Join(want, ",") || b.Commit == "" {
		t.Errorf("version --json = %+v", b)
	}
}
