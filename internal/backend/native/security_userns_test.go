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

// sandboxUserHostIDs returns the host uid and gid of the sandbox user
// (uid and gid 1000 inside) of the sandbox whose init is pid, through the
// init's id maps: the agent runs as root of the namespace, so its own
// ids are not the user's.
func sandboxUserHostIDs(t *testing.T, pid int) (uid, gid int) {
	t.Helper()
	mapped := func(file string, id int) int {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, file))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			var inside, host, n int
			if _, err := fmt.Sscan(line, &inside, &host, &n); err == nil && id >= inside && id < inside+n {
				return host + id - inside
			}
		}
		t.Fatalf("id %d is not in /proc/%d/%s: %q", id, pid, file, data)
		return -1
	}
	return mapped("uid_map", sandboxUID), mapped("gid_map", sandboxGID)
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

	a := backendtest.Create(t, b, sandbox.Spec{Template: sandbox.HostTemplate()})
	other := backendtest.Create(t, b, sandbox.Spec{Template: sandbox.HostTemplate()})
	root := backendtest.Create(t, b, sandbox.Spec{Template: sandbox.HostTemplate(), Root: true})
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
	// The agent is root of the sandbox's namespace: the first id of the
	// range, a host id of no account (checked above); the sandbox user is
	// the range's id 1000.
	hostUID, hostGID := sandboxUserHostIDs(t, a.Pid)
	if uid, gid := hostUIDs(t, a.Pid); uid != hostUID-sandboxUID || gid != hostGID-sandboxGID {
		t.Errorf("the agent runs as host %d:%d, want its namespace's root %d:%d", uid, gid, hostUID-sandboxUID, hostGID-sandboxGID)
	}
	bx, _ := b.lookup(a.ID)
	for _, f := range []string{"workspace/w", "home/h"} {
		if uid, gid := fileOwner(t, bx.diskPath(f)); uid != hostUID || gid != hostGID {
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
	if uid, _ := sandboxUserHostIDs(t, a.Pid); uid != hostUID {
		t.Fatalf("host uid changed across stop/start: %d, was %d", uid, hostUID)
	}

	// A restarted daemon keeps every range and gives a new sandbox a new one.
	b.abandoned.Store(true)
	b2 := newTestBackend(t, dir)
	if _, err := b2.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	fresh := backendtest.Create(t, b2, sandbox.Spec{Template: sandbox.HostTemplate()})
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
	victim := backendtest.Create(t, b, sandbox.Spec{Template: sandbox.HostTemplate()})
	vc := backendtest.Client(t, victim, "")
	hostCanInotify := func(t *testing.T) {
		t.Helper()
		fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
		if err != nil {
			t.Fatalf("host root cannot create an inotify instance: %v", err)
		}
		unix.Close(fd)
	}
	for _, spec := range []sandbox.Spec{{Template: sandbox.HostTemplate()}, {Template: sandbox.HostTemplate(), Root: true}} {
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

// TestSecurityIDRangeCheck: the daemon refuses sandbox id ranges that
// overlap a host account, a subordinate id range, or ids useradd may hand
// out, and accepts a clear range.
func TestSecurityIDRangeCheck(t *testing.T) {
	etc := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(etc, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("passwd", "root:x:0:0:root:/root:/bin/bash\nalice:x:1000:1000::/home/alice:/bin/bash\nsvc:x:3000000:3000000::/:/usr/sbin/nologin\n")
	write("group", "root:x:0:\nalice:x:1000:\nbig:x:5000000:\n")
	write("subuid", "# comment\nalice:100000:65536\nbob:7000000:65536\n")
	write("subgid", "alice:100000:65536\n")
	write("login.defs", "UID_MIN 1000\nUID_MAX  60000\nSUB_UID_MAX 600100000\n")

	for _, tc := range []struct {
		name        string
		base, count uint32
		want        string // "" = accepted
	}{
		{"default", DefaultIDBase, DefaultIDRanges, ""},
		{"passwd uid", 2000000, 16, `passwd entry "svc"`},
		{"group gid", 4980000, 1, `group entry "big"`},
		{"subuid", 6990000, 1, `subuid entry "bob"`},
		{"useradd range", 30000, 1, "UID_MIN-UID_MAX"},
		{"subordinate defaults", 500000000, 1, "SUB_UID_MIN-SUB_UID_MAX"},
		{"past 32 bits", 1 << 31, 1 << 15, "largest host id"},
		{"no ranges", DefaultIDBase, 0, "must be positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := validateIDRanges(etc, tc.base, tc.count)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused a free range: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want an error naming %q", err, tc.want)
			}
		})
	}
	// This host's own accounts do not collide with the defaults.
	if err := validateIDRanges("/etc", DefaultIDBase, DefaultIDRanges); err != nil {
		t.Fatalf("default ranges refused on this host: %v", err)
	}
}

// TestSecurityIDAllocator: ranges are distinct, reused as late as
// possible, never while reserved, and exhaustion is a clear quota error.
func TestSecurityIDAllocator(t *testing.T) {
	a := newIDAllocator(DefaultIDBase, 3, "/some/root")
	got := map[uint32]bool{}
	var first uint32
	for i := 0; i < 3; i++ {
		base, err := a.alloc(sandbox.ID(fmt.Sprint("s", i)))
		if err != nil {
			t.Fatal(err)
		}
		if got[base] || (base-DefaultIDBase)%idRangeSize != 0 {
			t.Fatalf("range %d handed out twice or misaligned", base)
		}
		got[base] = true
		if i == 0 {
			first = base
		}
	}
	if _, err := a.alloc("s3"); sandbox.ClassOf(err) != sandbox.ClassQuota {
		t.Fatalf("exhausted allocator: got %v, want a quota error", err)
	}
	a.free(first, "someone-else") // not its range: stays taken
	if _, err := a.alloc("s4"); err == nil {
		t.Fatal("a range freed by the wrong sandbox was reused")
	}
	a.free(first, "s0")
	if base, err := a.alloc("s5"); err != nil || base != first {
		t.Fatalf("freed range not reused: %d %v", base, err)
	}
	// A recorded range is reserved even when the base has moved since.
	b := newIDAllocator(DefaultIDBase, 4, "/other")
	b.reserve(DefaultIDBase+idRangeSize/2, "old") // straddles ranges 0 and 1
	for i := 0; i < 2; i++ {
		base, err := b.alloc(sandbox.ID(fmt.Sprint("n", i)))
		if err != nil {
			t.Fatal(err)
		}
		if base < DefaultIDBase+2*idRangeSize {
			t.Fatalf("allocated %d, overlapping a reserved range", base)
		}
	}
}

// TestSecurityWorkspaceDirReowned: a host workspace directory handed to a
// new sandbox (agentscope's DEFAULT_MOUNT_DIR workspaces, reused when a
// session is restored) becomes the new sandbox's: files of earlier
// sandboxes move to its range, host-owned files and symlink targets stay
// untouched.
func TestSecurityWorkspaceDirReowned(t *testing.T) {
	testutil.RequireRoot(t)
	b := newTestBackend(t, testutil.ShortTempDir(t))
	ws := filepath.Join(testutil.ShortTempDir(t), "ws")
	otherSandboxUser := 1<<30 + 7*65536 + 1000 // a file left by an earlier sandbox
	for _, f := range []struct {
		path     string
		dir      bool
		uid, gid int
	}{
		{"", true, 1000, 1000}, // as the manager creates it
		{"legacy", false, 1000, 1000},
		{"sub", true, otherSandboxUser, otherSandboxUser},
		{"sub/g", false, otherSandboxUser, otherSandboxUser},
		{"hostfile", false, 0, 0},
	} {
		p := filepath.Join(ws, f.path)
		var err error
		if f.dir {
			err = os.MkdirAll(p, 0o755)
		} else {
			err = os.WriteFile(p, []byte("x\n"), 0o644)
		}
		if err == nil {
			err = os.Lchown(p, f.uid, f.gid)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(ws, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(filepath.Join(ws, "link"), 1000, 1000); err != nil {
		t.Fatal(err)
	}
	box := backendtest.Create(t, b, sandbox.Spec{Template: sandbox.HostTemplate(), WorkspaceDir: ws})
	c := backendtest.Client(t, box, "")
	r := backendtest.Exec(t, c, "echo y >> /workspace/legacy && echo y >> /workspace/sub/g && touch /workspace/new && echo ok; echo y >> /workspace/hostfile 2>/dev/null || echo refused")
	if r.Stdout != "ok\nrefused\n" {
		t.Fatalf("sandbox user in its workspace: %q %q", r.Stdout, r.Stderr)
	}
	uid, gid := sandboxUserHostIDs(t, box.Pid)
	for _, f := range []string{"", "legacy", "sub", "sub/g", "new", "link"} {
		if u, g := fileOwner(t, filepath.Join(ws, f)); u != uid || g != gid {
			t.Errorf("workspace %q owned by %d:%d, want the sandbox user's %d:%d", f, u, g, uid, gid)
		}
	}
	if u, _ := fileOwner(t, filepath.Join(ws, "hostfile")); u != 0 {
		t.Errorf("host-owned file given to uid %d", u)
	}
	if u, _ := fileOwner(t, "/etc/passwd"); u != 0 {
		t.Fatalf("symlink followed: /etc/passwd now owned by %d", u)
	}
}

// TestSecurityRestingIDRange: the resting range (owner of the build's
// cache mounts between steps) is one no sandbox is ever given: the last
// range no recorded sandbox holds; none when a single range is configured.
func TestSecurityRestingIDRange(t *testing.T) {
	a := newIDAllocator(DefaultIDBase, 3, "/some/root")
	a.reserve(DefaultIDBase+2*idRangeSize, "recorded")
	rest := a.reserveResting()
	if rest != DefaultIDBase+idRangeSize {
		t.Fatalf("resting range %d, want the last free one %d", rest, DefaultIDBase+idRangeSize)
	}
	a.free(DefaultIDBase+2*idRangeSize, "recorded")
	for i := range 2 {
		base, err := a.alloc(sandbox.ID(fmt.Sprint("s", i)))
		if err != nil || base == rest {
			t.Fatalf("alloc %d: %d %v (resting %d)", i, base, err, rest)
		}
	}
	if _, err := a.alloc("s2"); err == nil {
		t.Fatal("the resting range was handed to a sandbox")
	}
	if got := newIDAllocator(DefaultIDBase, 1, "/x").reserveResting(); got != 0 {
		t.Fatalf("one range configured: resting range %d, want none", got)
	}
}
