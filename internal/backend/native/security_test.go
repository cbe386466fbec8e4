package native

import (
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/backend/backendtest"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/testutil"
)

// TestSecurityEscapes runs the security checks every backend passes
// (backendtest.RunSecurity: syscalls, credentials, host files and info,
// read-only root, network, disk and /tmp caps, memory and pids limits,
// timeouts, signals to the agent), with the guarantees only native has:
// the agent's socket is not in the sandbox, no state path shows in
// mountinfo, and /etc/passwd is the generated one.
func TestSecurityEscapes(t *testing.T) {
	testutil.RequireRoot(t)
	dir := testutil.ShortTempDir(t)
	b := newTestBackend(t, dir)
	backendtest.RunSecurity(t, backendtest.Security{
		Backend:           b,
		Template:          sandbox.HostTemplate(),
		AgentInSandbox:    agentPathInSandbox,
		AgentSocketHidden: true,
		StateDir:          dir,
	})
	t.Run("GeneratedPasswd", func(t *testing.T) {
		box := backendtest.Create(t, b, sandbox.Spec{Template: sandbox.HostTemplate()})
		r := backendtest.Exec(t, backendtest.Client(t, box, ""), "cat /etc/passwd")
		if strings.Count(r.Stdout, ":x:") != 3 {
			t.Errorf("/etc/passwd is not the generated one: %q", r.Stdout)
		}
	})
}

func TestRootSandboxIsUserNamespaced(t *testing.T) {
	testutil.RequireRoot(t)
	b := newTestBackend(t, testutil.ShortTempDir(t))
	box := backendtest.Create(t, b, sandbox.Spec{Template: sandbox.HostTemplate(), Root: true})
	c := backendtest.Client(t, box, "")
	r := backendtest.Exec(t, c, "id -u; cat /proc/self/uid_map; touch /workspace/f /root/f && echo writable; touch /usr/x 2>&1; grep -E '^(CapEff|Seccomp|NoNewPrivs):' /proc/self/status")
	lines := strings.Split(r.Stdout, "\n")
	if len(lines) < 3 || lines[0] != "0" {
		t.Fatalf("not root inside: %q %q", r.Stdout, r.Stderr)
	}
	if f := strings.Fields(lines[1]); len(f) != 3 || f[0] != "0" || f[1] == "0" {
		t.Fatalf("uid 0 is not mapped to an unprivileged host uid: %q", lines[1])
	}
	for _, want := range []string{"writable", "Read-only file system", "Seccomp:\t2", "NoNewPrivs:\t1"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("root sandbox output lacks %q:\n%s", want, r.Stdout)
		}
	}
	// Root in the sandbox still cannot mount or create namespaces.
	r = backendtest.Exec(t, c, "mount -t tmpfs x /mnt 2>&1; unshare -U true 2>&1; echo end")
	if strings.Contains(r.Stdout, "\nend") && !strings.Contains(r.Stdout, "ermission denied") && !strings.Contains(r.Stdout, "Operation not permitted") {
		t.Fatalf("root sandbox could mount or unshare: %s", r.Stdout)
	}
	// Files it creates belong to its mapped range on the host, not to root.
	bx, _ := b.lookup(box.ID)
	st, err := os.Stat(bx.diskPath("workspace", "f"))
	if err != nil {
		t.Fatal(err)
	}
	if uid := st.Sys().(*syscall.Stat_t).Uid; uid == 0 {
		t.Fatalf("file created by sandbox root is owned by host root")
	}
	// The default user can be chosen per process.
	res, err := backendtest.ExecErr(ctxT(t), c, agentclient.StartOptions{Cmd: "id", Args: []string{"-un"}, User: "user"})
	if err != nil || res.Stdout != "user\n" {
		t.Fatalf("run as user in a root sandbox: %+v %v", res, err)
	}
}
