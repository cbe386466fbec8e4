package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// agentHostPid returns the host pid of a sandbox's agent (its init), from
// libcontainer's state of the native backend.
func agentHostPid(t *testing.T, d *daemon, id string) int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(d.dataDir, "native", "state", "libcontainer", id, "state.json"))
	if err != nil {
		t.Fatalf("read container state: %v", err)
	}
	var st struct {
		Pid int `json:"init_process_pid"`
	}
	if err := json.Unmarshal(data, &st); err != nil || st.Pid <= 1 {
		t.Fatalf("container state has no init pid (%v): %s", err, data)
	}
	return st.Pid
}

// TestSecurityAgentDeathIsReported kills a sandbox's agent from the host
// (as the OOM killer would) and checks that the API stops reporting the
// sandbox as running, says why in its log, and refuses to use the dead
// agent.
func TestSecurityAgentDeathIsReported(t *testing.T) {
	d := startDaemon(t, "BEARER_TOKEN=k", "AUTO_CLEANUP=true")
	const key = "k"
	id := createRaw(t, d, key, map[string]any{"template": "host"})
	pid := agentHostPid(t, d, id)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill agent %d: %v", pid, err)
	}

	var state string
	for i := 0; i < 200; i++ { // bounded: 200 x 50ms
		status, data := d.call(t, "GET", "/v1/sandboxes/"+id, key, nil)
		if status != http.StatusOK {
			t.Fatalf("get: %d %s", status, data)
		}
		if state, _ = mustJSON(t, data)["state"].(string); state != "running" {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if state != "stopped" {
		t.Fatalf("state after the agent was killed = %q, want stopped", state)
	}
	status, data := d.call(t, "GET", "/v1/sandboxes?state=running", key, nil)
	if status != http.StatusOK || strings.Contains(string(data), id) {
		t.Fatalf("sandbox still listed as running: %d %s", status, data)
	}
	status, data = d.call(t, "GET", "/v1/sandboxes/"+id+"/logs", key, nil)
	if status != http.StatusOK || !strings.Contains(string(data), "agent exited") {
		t.Errorf("sandbox log does not tell that the agent died: %d %s", status, data)
	}
	status, data = d.call(t, "POST", "/v1/sandboxes/"+id+"/exec", key, map[string]any{"cmd": []string{"true"}})
	if status != http.StatusConflict {
		t.Errorf("exec in a sandbox whose agent died: %d %s, want 409", status, data)
	}
	// It can be started again, like any stopped sandbox.
	status, data = d.call(t, "POST", "/v1/sandboxes/"+id+"/start", key, map[string]any{})
	if status != http.StatusOK {
		t.Fatalf("start after agent death: %d %s", status, data)
	}
	status, data = d.call(t, "POST", "/v1/sandboxes/"+id+"/exec", key, map[string]any{"cmd": []string{"echo", "back"}})
	if status != http.StatusOK || mustJSON(t, data)["stdout"] != "back\n" {
		t.Fatalf("exec after restart: %d %s", status, data)
	}
}

// TestSecurityExecTimeoutEndsDetachedProcesses runs, through the API, a
// command that detaches sleeps (setsid, double fork) and outlives its 1s
// timeout: after the timeout none of them may remain in the sandbox.
func TestSecurityExecTimeoutEndsDetachedProcesses(t *testing.T) {
	d := startDaemon(t, "BEARER_TOKEN=k", "AUTO_CLEANUP=true")
	const key = "k"
	id := createRaw(t, d, key, map[string]any{"template": "host"})
	script := `setsid sh -c 'sleep 999.25' &
( (sleep 999.25 &) & )
( setsid sh -c 'sleep 999.25 &' & )
sleep 0.3; echo started; sleep 100`
	status, data := d.call(t, "POST", "/v1/sandboxes/"+id+"/exec", key,
		map[string]any{"cmd": []string{"sh", "-c", script}, "timeout": 1})
	m := mustJSON(t, data)
	if status != http.StatusOK || m["timed_out"] != true || m["stdout"] != "started\n" {
		t.Fatalf("exec: %d %s", status, data)
	}
	// Count the survivors from inside the sandbox (bounded wait).
	count := `n=0; for f in /proc/[0-9]*/cmdline; do [ "$(tr '\0' ' ' < $f 2>/dev/null)" = "sleep 999.25 " ] && n=$((n+1)); done; echo $n`
	var left string
	for i := 0; i < 50; i++ {
		status, data = d.call(t, "POST", "/v1/sandboxes/"+id+"/exec", key, map[string]any{"cmd": []string{"sh", "-c", count}})
		if status != http.StatusOK {
			t.Fatalf("count: %d %s", status, data)
		}
		if left, _ = mustJSON(t, data)["stdout"].(string); left == "0\n" {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("detached processes of the timed-out exec still run: %q", left)
}
