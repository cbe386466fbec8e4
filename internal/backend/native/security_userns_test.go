package native

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/backend/backendtest"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/testutil"
)

// hostUIDs returns the real uid and gid, on the host, of process pid.
func hostUIDs(t *testing.T, pid int) (uid, gid int) {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	uid, gid = -1, -1
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "Uid:":
			uid, _ = strconv.Atoi(f[1])
		case "Gid:":
			gid, _ = strconv.Atoi(f[1])
		}
	}
	if uid < 0 || gid < 0 {
		t.Fatalf("no Uid/Gid in /proc/%d/status", pid)
	}
	return uid, gid
}

// passwdIDs returns the uids of /etc/passwd and gids of /etc/group.
func passwdIDs(t *testing.T) map[int]string {
	t.Helper()
	ids := map[int]string{}
	for _, file := range []string{"/etc/passwd", "/etc/group"} {
		f, err := os.Open(file)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Split(sc.Text(), ":")
			if len(fields) > 2 {
				if n, err := strconv.Atoi(fields[2]); err == nil {
					ids[n] = file + ":" + fields[0]
				}
			}
		}
		f.Close()
	}
	return ids
}

func fileOwner(t *testing.T, path string) (int, int) {
	t.Helper()
	st, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	s := st.Sys().(*syscall.Stat_t)
	return int(s.Uid), int(s.Gid)
}

// TestSecuritySandboxesHaveOwnHostIDs: every sandbox, root or not, runs as
// host ids of its own that belong to no host account, while inside it is
// still uid 1000 "user" (or root) and owns its workspace and home. The
// range survives stop/start and a daemon restart, and is not given to
// another sandbox meanwhile.
func TestSecuritySandboxesHaveOwnHostIDs(t *testing.T) {
	testutil.RequireRoot(t)
	dir := testutil.ShortTempDir(t)
	b := newTestBackend(t, dir)
	accounts := passwdIDs(t)

	a := backendtest.Create(t, b, sandbox.Spec{Template: "host"})
	other := backendtest.Create(t, b, sandbox.Spec{Template: "host"})
	root := backendtest.Create(t, b, sandbox.Spec{Template: "host", Root: true})
	seen := map[int]sandbox.ID{}
	for _, box := range []sandbox.Info{a, other, root} {
		uid, gid := hostUIDs(t, box.Pid)
		for _, id := range []int{uid, gid} {
			if name, ok := accounts[id]; ok {
				t.Errorf("sandbox %s runs as host id %d, the host account %s", box.ID, id, name)
			}
		}
		if prev, ok := seen[uid]; ok {
			t.Errorf("sandboxes %s and %s share host uid %d", prev, box.ID, uid)
		}
		seen[uid] = box.ID
	}

	c := backendtest.Client(t, a, "")
	r := backendtest.Exec(t, c, "id -u; id -un; touch /workspace/w /home/user/h && echo writable")
	if r.Stdout != "1000\nuser\nwritable\n" {
		t.Fatalf("inside the sandbox: %q %q", r.Stdout, r.Stderr)
	}
	hostUID, hostGID := hostUIDs(t, a.Pid)
	bx, _ := b.lookup(a.ID)
	for _, f := range []string{"workspace/w", "home/h"} {
		if uid, gid := fileOwner(t, filepath.Join(bx.paths.disk, f)); uid != hostUID || gid != hostGID {
			t.Errorf("%s is owned by %d:%d on the host, want the sandbox user's %d:%d", f, uid, gid, hostUID, hostGID)
		}
	}

	// Stop/start keeps the range: the disk's files stay the sandbox's.
	ctx := ctxT(t)
	if err := b.Stop(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	a, err := b.Start(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if uid, _ := hostUIDs(t, a.Pid); uid != hostUID {
		t.Fatalf("host uid changed across stop/start: %d, was %d", uid, hostUID)
	}

	// A restarted daemon keeps every range and gives a new sandbox a new one.
	b.abandoned.Store(true)
	b2 := newTestBackend(t, dir)
	if _, err := b2.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	fresh := backendtest.Create(t, b2, sandbox.Spec{Template: "host"})
	if uid, _ := hostUIDs(t, fresh.Pid); seen[uid] != "" {
		t.Fatalf("new sandbox after restart got host uid %d of sandbox %s", uid, seen[uid])
	}
	c = backendtest.Client(t, a, "")
	if r := backendtest.Exec(t, c, "echo again > /workspace/w && cat /workspace/w"); r.Stdout != "again\n" {
		t.Fatalf("sandbox cannot write its own workspace after restart: %q %q", r.Stdout, r.Stderr)
	}
	for _, id := range []sandbox.ID{a.ID, other.ID, root.ID} {
		if err := b2.Destroy(ctx, id); err != nil {
			t.Error(err)
		}
	}
}

// inotifyHog holds as many inotify instances as the kernel gives it and
// prints how many; it stays alive until its sandbox is destroyed.
const inotifyHog = `
import ctypes, time
libc = ctypes.CDLL(None, use_errno=True)
fds = []
while len(fds) < 4096:
    fd = libc.inotify_init()
    if fd < 0:
        break
    fds.append(fd)
print(len(fds), flush=True)
time.sleep(600)
`

const inotifyOne = `python3 -c 'import ctypes; libc = ctypes.CDLL(None, use_errno=True); fd = libc.inotify_init(); print("ok" if fd >= 0 else "errno %d" % ctypes.get_errno())'`

// startInotifyHog runs inotifyHog in its own session in the sandbox and
// returns how many instances it got.
func startInotifyHog(t *testing.T, info sandbox.Info) int {
	t.Helper()
	c := backendtest.Client(t, info, "")
	script := strings.ReplaceAll(inotifyHog, "'", `'"'"'`)
	r := backendtest.Exec(t, c, "setsid python3 -c '"+script+"' >/tmp/hog.out 2>&1 </dev/null & "+
		"for i in $(seq 200); do [ -s /tmp/hog.out ] && break; sleep 0.05; done; cat /tmp/hog.out")
	n, err := strconv.Atoi(strings.TrimSpace(r.Stdout))
	if err != nil {
		t.Fatalf("inotify hog: %q %q", r.Stdout, r.Stderr)
	}
	return n
}

// TestSecurityInotifyPerSandbox: a sandbox that takes every inotify
// instance the kernel allows one user does not take them from another
// sandbox, nor from the host's root.
func TestSecurityInotifyPerSandbox(t *testing.T) {
	testutil.RequireRoot(t)
	b := newTestBackend(t, testutil.ShortTempDir(t))
	victim := backendtest.Create(t, b, sandbox.Spec{Template: "host"})
	vc := backendtest.Client(t, victim, "")
	hostCanInotify := func(t *testing.T) {
		t.Helper()
		fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
		if err != nil {
			t.Fatalf("host root cannot create an inotify instance: %v", err)
		}
		unix.Close(fd)
	}
	for _, spec := range []sandbox.Spec{{Template: "host"}, {Template: "host", Root: true}} {
		t.Run(fmt.Sprintf("root=%v", spec.Root), func(t *testing.T) {
			hog := backendtest.Create(t, b, spec)
			defer b.Destroy(context.Background(), hog.ID)
			if n := startInotifyHog(t, hog); n >= 4096 {
				t.Fatalf("hog got %d instances: no limit to exhaust", n)
			}
			if r := backendtest.Exec(t, vc, inotifyOne); r.Stdout != "ok\n" {
				t.Errorf("another sandbox lost inotify: %q %q %+v", r.Stdout, r.Stderr, r.Exit)
			}
			hostCanInotify(t)
		})
	}
}
