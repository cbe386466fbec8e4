package native

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/testutil"
)

const rootlessChildEnv = "AGENTBOX_TEST_ROOTLESS_CHILD"

// rootlessResult is what the unprivileged child reports.
type rootlessResult struct {
	Err          string            `json:"err,omitempty"`
	Capabilities map[string]any    `json:"capabilities"`
	Outputs      map[string]string `json:"outputs"`
	DirLeft      bool              `json:"dir_left"`
}

// rootlessChild runs as an unprivileged user: it creates a rootless
// backend and a sandbox, runs probes in it, destroys it and reports.
func rootlessChild() {
	res := rootlessResult{Outputs: map[string]string{}}
	defer func() {
		json.NewEncoder(os.Stdout).Encode(res)
		os.Exit(0)
	}()
	dir := os.Getenv(rootlessChildEnv)
	b, err := New(Config{Root: dir, AgentPath: os.Getenv("AGENTBOX_AGENT_PATH")})
	if err != nil {
		res.Err = "new: " + err.Error()
		return
	}
	caps, _ := json.Marshal(b.Capabilities())
	json.Unmarshal(caps, &res.Capabilities)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id := sandbox.NewID()
	info, err := b.Create(ctx, sandbox.Spec{ID: id, Template: sandbox.HostTemplate(), Resources: sandbox.Resources{MemoryBytes: 256 << 20}})
	if err != nil {
		res.Err = "create: " + err.Error()
		return
	}
	c := agentclient.New(agentclient.Endpoint{Network: info.Agent.Network, Address: info.Agent.Address}, "")
	probes := map[string]string{
		"id":       "id -u; cat /proc/self/uid_map",
		"usr":      "touch /usr/x 2>&1; echo rc=$?",
		"mount":    "mount -t tmpfs x /mnt 2>&1; echo rc=$?",
		"seccomp":  "grep -E '^(Seccomp|NoNewPrivs):' /proc/self/status",
		"files":    "echo kept > /workspace/f && cat /workspace/f && ls /root >/dev/null && echo home-ok",
		"network":  `python3 -c 'import socket; s=socket.socket(); s.settimeout(2)` + "\ntry:\n    s.connect((\"1.1.1.1\", 80)); print(\"CONNECTED\")\nexcept OSError as e:\n    print(\"refused\")'",
		"hostroot": "ls -A /root | head -3",
	}
	for name, script := range probes {
		var out strings.Builder
		if _, err := c.Run(ctx, agentclient.StartOptions{Cmd: "/bin/sh", Args: []string{"-c", script}}, nil, &out, io.Discard); err != nil {
			out.WriteString("ERR " + err.Error())
		}
		res.Outputs[name] = out.String()
	}
	c.Close()
	// No freezer without root: pause is refused as unavailable.
	res.Outputs["pause"] = string(sandbox.ClassOf(b.Pause(ctx, id)))
	if err := b.Destroy(ctx, id); err != nil {
		res.Err = "destroy: " + err.Error()
		return
	}
	b.Close()
	_, err = os.Stat(filepath.Join(dir, "state", "sb", string(id)))
	res.DirLeft = err == nil
}

// TestRootless runs a rootless backend as an unprivileged user (nobody)
// and checks that its sandbox is isolated the way rootless mode promises.
func TestRootless(t *testing.T) {
	testutil.RequireRoot(t)
	if data, err := os.ReadFile("/proc/sys/user/max_user_namespaces"); err == nil && strings.TrimSpace(string(data)) == "0" {
		t.Skip("user namespaces are disabled")
	}
	// The test binary and the agent must be reachable by nobody.
	tmp, err := os.MkdirTemp("/tmp", "abxrl")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	os.Chmod(tmp, 0o755)
	bin := filepath.Join(tmp, "native.test")
	if out, err := exec.Command("cp", fmt.Sprintf("/proc/%d/exe", os.Getpid()), bin).CombinedOutput(); err != nil {
		t.Fatalf("copy test binary: %v %s", err, out)
	}
	agent := filepath.Join(tmp, "agent")
	if out, err := exec.Command("cp", testutil.AgentBinary(t), agent).CombinedOutput(); err != nil {
		t.Fatalf("copy agent: %v %s", err, out)
	}
	os.Chmod(bin, 0o755)
	os.Chmod(agent, 0o755)
	state := filepath.Join(tmp, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	const nobody = 65534
	if err := os.Chown(state, nobody, nobody); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = []string{"PATH=/usr/bin:/bin", rootlessChildEnv + "=" + state, "AGENTBOX_AGENT_PATH=" + agent, "HOME=" + tmp}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("rootless child: %v\n%s", err, out)
	}
	var res rootlessResult
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("child output %q: %v", out, err)
	}
	if res.Err != "" {
		t.Fatalf("rootless child: %s", res.Err)
	}
	if res.Capabilities["rootless"] != true || res.Capabilities["disk_limit"] == true || res.Capabilities["pause"] == true {
		t.Errorf("capabilities = %v", res.Capabilities)
	}
	want := map[string]string{
		"id":       fmt.Sprintf("0\n         0      %d          1\n", nobody),
		"seccomp":  "NoNewPrivs:\t1\nSeccomp:\t2\n",
		"files":    "kept\nhome-ok\n",
		"network":  "refused\n",
		"hostroot": "",
		"pause":    string(sandbox.ClassUnavailable),
	}
	for name, w := range want {
		if res.Outputs[name] != w {
			t.Errorf("%s: %q, want %q", name, res.Outputs[name], w)
		}
	}
	for _, name := range []string{"usr", "mount"} {
		if strings.Contains(res.Outputs[name], "rc=0") {
			t.Errorf("%s succeeded in a rootless sandbox: %q", name, res.Outputs[name])
		}
	}
	if res.DirLeft {
		t.Error("sandbox dir left after destroy")
	}
}
