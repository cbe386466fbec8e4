package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
)

// sandboxProcesses counts processes whose cgroup is one of the daemon's
// sandboxes (under the "agentbox" cgroup parent).
func sandboxProcesses(t *testing.T, ids ...string) int {
	t.Helper()
	return len(sandboxProcessList(ids...))
}

// sandboxProcessList describes the processes of the given sandboxes.
func sandboxProcessList(ids ...string) []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		if err != nil {
			continue
		}
		for _, id := range ids {
			if strings.Contains(string(data), "/agentbox/") && strings.Contains(string(data), "/"+id+"\n") {
				stat, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
				out = append(out, strings.TrimSpace(string(stat)))
			}
		}
	}
	return out
}

func TestRestartWithoutAutoCleanupReattaches(t *testing.T) {
	for _, how := range []string{"SIGTERM", "SIGKILL"} {
		t.Run(how, func(t *testing.T) {
			d := startDaemon(t, "AUTO_CLEANUP=false", "API_KEYS=k1:alice")
			c := d.sdk(t, "k1")
			ctx := context.Background()
			sb, err := c.Create(ctx, client.CreateRequest{Metadata: map[string]string{"keep": "me"}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"/bin/sh", "-c", "echo state > /workspace/f"}}); err != nil {
				t.Fatal(err)
			}
			if how == "SIGKILL" {
				d.kill()
			} else {
				d.stop()
			}
			if n := sandboxProcesses(t, sb.ID); n == 0 {
				t.Fatalf("sandbox processes died with the daemon (%s)", how)
			}
			d.start()
			c = d.sdk(t, "k1")
			got, err := c.Get(ctx, sb.ID)
			if err != nil || got.Metadata["keep"] != "me" || got.AccessToken != sb.AccessToken {
				t.Fatalf("after restart: %+v %v", got, err)
			}
			res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"cat", "/workspace/f"}})
			if err != nil || res.Stdout != "state\n" {
				t.Fatalf("exec after restart: %+v %v", res, err)
			}
			// Ownership survived too.
			if _, err := d.sdk(t, "").Get(ctx, sb.ID); !client.IsUnauthenticated(err) {
				t.Fatalf("anonymous get after restart: %v", err)
			}
			if err := c.Delete(ctx, sb.ID); err != nil {
				t.Fatal(err)
			}
			// A recovered sandbox's init is no longer the daemon's child: the
			// host's init reaps it, so its zombie may linger for a moment.
			deadline := time.Now().Add(10 * time.Second)
			for left := sandboxProcessList(sb.ID); len(left) != 0; left = sandboxProcessList(sb.ID) {
				if time.Now().After(deadline) {
					t.Fatalf("processes left after delete: %q", left)
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}

func TestRestartWithAutoCleanupDestroys(t *testing.T) {
	d := startDaemon(t, "AUTO_CLEANUP=true", "POOL_SIZE=1")
	c := d.sdk(t, "")
	ctx := context.Background()
	var ids []string
	for i := 0; i < 2; i++ {
		sb, err := c.Create(ctx, client.CreateRequest{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sb.ID)
	}
	d.stop()
	if n := sandboxProcesses(t, ids...); n != 0 {
		t.Fatalf("%d sandbox processes survived a graceful stop with AUTO_CLEANUP", n)
	}
	assertNoLeftovers(t, d.dataDir)
	d.start()
	for _, id := range ids {
		if _, err := d.sdk(t, "").Get(ctx, id); !client.IsNotFound(err) {
			t.Fatalf("sandbox %s after restart: %v", id, err)
		}
	}
}

func TestStartupConfigErrors(t *testing.T) {
	daemonBin, _ := binaries(t)
	dir := t.TempDir()
	envFile := filepath.Join(dir, "bad.env")
	os.WriteFile(envFile, []byte("PORT=8123\nPOOL_SIZ=3\n"), 0o600)
	cases := map[string][]string{
		"POOL_SIZ":       {"serve", "--config", envFile},
		"PORT":           {"serve", "--set", "PORT=99999"},
		"HOST":           {"serve", "--set", "HOST=0.0.0.0", "--set", "AGENTBOX_DATA_DIR=" + dir},
		"POOL_SIZE":      {"serve", "--set", "POOL_SIZE=-1"},
		"DEFAULT_MEMORY": {"serve", "--set", "DEFAULT_MEMORY=lots"},
	}
	for name, args := range cases {
		cmd := execCommand(daemonBin, args...)
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Errorf("%s: daemon started with a bad setting", name)
			continue
		}
		if !strings.Contains(string(out), name) {
			t.Errorf("%s: error does not name the setting: %s", name, out)
		}
	}
}
