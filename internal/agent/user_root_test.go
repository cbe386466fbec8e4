package agent_test

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/agent/agenttest"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// status returns the lines of /proc/self/status of a command run as
// user that name the ids, capability sets and no_new_privs.
func status(t *testing.T, c *agentclient.Client, user string) string {
	t.Helper()
	var out bytes.Buffer
	res, err := c.Run(testCtx(t), agentclient.StartOptions{Cmd: "sh", Args: []string{"-c",
		"grep -E '^(Uid|Gid|Groups|CapInh|CapPrm|CapEff|CapBnd|CapAmb):' /proc/self/status"}, User: user}, nil, &out, nil)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("status as %q: %+v %v", user, res, err)
	}
	return out.String()
}

// TestRootAgentActsAsItsDefaultUser: an agent running as root with a
// default user (--user, as native sandboxes run it: root of the sandbox's
// user namespace, acting as uid 1000) runs every command and file
// operation that names no user as that user, holding no capability and
// unable to gain one (an empty bounding set), through either exec shim
// and for code interpreters; a request for root acts as root.
func TestRootAgentActsAsItsDefaultUser(t *testing.T) {
	forEachShim(t, func(t *testing.T, goShim bool) {
		requireRoot(t)
		a, c := startAgent(t, agenttest.Options{GoShim: goShim, User: "65534:65534", Env: []string{"USER=nobody", "HOME=/nonexistent"}})
		ctx := testCtx(t)
		nobody := status(t, c, "")
		for _, want := range []string{"Uid:\t65534\t65534\t65534\t65534", "Gid:\t65534\t65534\t65534\t65534",
			"CapInh:\t0000000000000000", "CapPrm:\t0000000000000000", "CapEff:\t0000000000000000",
			"CapBnd:\t0000000000000000", "CapAmb:\t0000000000000000"} {
			if !strings.Contains(nobody, want) {
				t.Errorf("a command naming no user lacks %q:\n%s", want, nobody)
			}
		}
		if named := status(t, c, "nobody"); named != nobody {
			t.Errorf("the default user by name:\n%s\nwant\n%s", named, nobody)
		}
		root := status(t, c, "root")
		if !strings.Contains(root, "Uid:\t0\t0\t0\t0") || strings.Contains(root, "CapEff:\t0000000000000000") {
			t.Errorf("a command as root:\n%s", root)
		}
		var out bytes.Buffer
		if _, err := c.Run(ctx, agentclient.StartOptions{Cmd: "sh", Args: []string{"-c", "echo $USER $HOME"}}, nil, &out, nil); err != nil || out.String() != "nobody /nonexistent\n" {
			t.Errorf("the default user's environment: %q %v", out.String(), err)
		}

		// Files: the default user's are its own, root's root's, and the
		// default user has only its own permissions (the agent's
		// CAP_DAC_OVERRIDE does not apply to it).
		mine := filepath.Join(a.Workdir, "mine")
		if _, err := c.Upload(ctx, mine, "", strings.NewReader("x")); err != nil {
			t.Fatal(err)
		}
		rootFile := filepath.Join(a.Workdir, "root-only")
		if _, err := c.Upload(ctx, rootFile, "root", strings.NewReader("secret")); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(rootFile, 0o600); err != nil {
			t.Fatal(err)
		}
		for path, want := range map[string]uint32{mine: 65534, rootFile: 0} {
			st, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if uid := st.Sys().(*syscall.Stat_t).Uid; uid != want {
				t.Errorf("%s is owned by %d, want %d", path, uid, want)
			}
		}
		if e, err := c.Stat(ctx, rootFile, ""); err != nil || e.Owner != "root" {
			t.Errorf("stat of root's file: %+v %v", e, err)
		}
		for range 3 { // on the default user's kept threads, again and again
			if rc, _, err := c.Download(ctx, rootFile, ""); sandbox.ClassOf(err) != sandbox.ClassForbidden {
				if rc != nil {
					rc.Close()
				}
				t.Fatalf("the default user read root's 0600 file: %v", err)
			}
		}
		rc, _, err := c.Download(ctx, rootFile, "root")
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(rc)
		rc.Close()
		if string(got) != "secret" {
			t.Errorf("root's download: %q", got)
		}
	})
}

// TestRootAgentCodeContextAsDefaultUser: interpreters of an agent with a
// default user run as that user, without capabilities, unless root is
// asked for.
func TestRootAgentCodeContextAsDefaultUser(t *testing.T) {
	requireRoot(t)
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("needs /usr/bin/python3")
	}
	_, c := startAgent(t, agenttest.Options{User: "65534:65534", Env: []string{systemPath}, LogLevel: "info"})
	ctx := testCtx(t)
	read := "print(os.getuid(), [l.split()[1] for l in open('/proc/self/status') if l.startswith(('CapEff', 'CapBnd'))])"
	for user, want := range map[string]string{
		"":     "65534 ['0000000000000000', '0000000000000000']\n",
		"root": "0 ",
	} {
		pc, err := c.CreateContext(ctx, "python", "", user)
		if err != nil {
			t.Fatal(err)
		}
		x := run(t, c, agentclient.ExecuteRequest{ContextID: pc.ID, Code: "import os\n" + read})
		wantNoError(t, x)
		if !strings.HasPrefix(stdout(x), want) || user == "root" && strings.Contains(stdout(x), "'0000000000000000'") {
			t.Errorf("interpreter as %q: %q, want %q...", user, stdout(x), want)
		}
	}
}

// BenchmarkStatAs: a file operation of the agent's own identity, of the
// default user of a root agent (on its kept threads), and of another user
// (a thread started and ended per call).
//
//	go test -run '^$' -bench StatAs ./internal/agent/
func BenchmarkStatAs(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	for _, bc := range []struct{ name, agentUser, user string }{
		{"Self", "", ""}, {"DefaultUser", "65534:65534", ""}, {"OtherUser", "", "nobody"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			a := agenttest.Start(b, agenttest.Options{User: bc.agentUser, LogLevel: "warn"})
			c := a.Client(b, "")
			ctx := b.Context()
			for b.Loop() {
				if _, err := c.Stat(ctx, a.Workdir, bc.user); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
