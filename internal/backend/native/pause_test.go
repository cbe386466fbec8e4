package native

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/cgroups"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/backend/backendtest"
	"github.com/agentbox/agentbox/internal/cgroupfs"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/testutil"
)

// counterScript counts in a shell variable (memory), writes every value
// through a file descriptor it keeps open (an open file) and to a file
// it rewrites, so the host can watch it from outside the sandbox.
const counterScript = `exec 3>/workspace/log; i=0; while :; do i=$((i+1)); echo $i >&3; echo $i > /workspace/counter.tmp; mv /workspace/counter.tmp /workspace/counter; sleep 0.02; done`

// startCounter starts counterScript and waits for it to count.
func startCounter(t *testing.T, b *Backend, info sandbox.Info) {
	t.Helper()
	c := backendtest.Client(t, info, "")
	p, err := c.Start(ctxT(t), agentclient.StartOptions{Cmd: "/bin/sh", Args: []string{"-c", counterScript}})
	if err != nil {
		t.Fatalf("start counter: %v", err)
	}
	p.Close() // the counter runs on without the stream
	waitCounter(t, b, info.ID, 1)
}

// hostCounter reads the counter from the host, through the sandbox's disk.
func hostCounter(t *testing.T, b *Backend, id sandbox.ID) int {
	t.Helper()
	bx, err := b.lookup(id)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(bx.diskPath("workspace", "counter"))
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	return n
}

// waitCounter waits, bounded, until the counter passes above.
func waitCounter(t *testing.T, b *Backend, id sandbox.ID, above int) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if n := hostCounter(t, b, id); n > above {
			return n
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("counter of %s did not pass %d", id, above)
	return 0
}

// sandboxPids lists the host pids of the sandbox's lasting processes.
func sandboxPids(t *testing.T, b *Backend, id sandbox.ID) []int {
	t.Helper()
	bx, _ := b.lookup(id)
	p := b.cgroupPaths(bx)
	dir := p["freezer"]
	if isCgroup2() {
		dir = p[""]
	}
	all, err := cgroups.GetAllPids(dir)
	if err != nil {
		t.Fatalf("sandbox pids: %v", err)
	}
	// The counter's sleep and mv come and go, and so does each fork of its
	// shell before it execs one (comm "sh" under a parent "sh": a loaded
	// machine shows that window); everything else stays.
	commOf := func(pid int) string {
		comm, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
		return strings.TrimSpace(string(comm))
	}
	var pids []int
	for _, pid := range all {
		c := commOf(pid)
		if c == "sleep" || c == "mv" || c == "" {
			continue
		}
		if c == "sh" && commOf(parentPid(pid)) == "sh" {
			continue
		}
		pids = append(pids, pid)
	}
	slices.Sort(pids)
	return pids
}

func wantFreezer(t *testing.T, b *Backend, id sandbox.ID, frozen bool) {
	t.Helper()
	bx, _ := b.lookup(id)
	got := b.freezerState(bx)
	want := map[bool][]string{true: {"FROZEN", "1"}, false: {"THAWED", "0"}}[frozen]
	if !slices.Contains(want, got) {
		t.Fatalf("freezer state of %s = %q, want one of %v", id, got, want)
	}
}

// checkLog checks the counter's log (written through its open fd) is
// 1, 2, ... n with no gap and no restart, and returns n.
func checkLog(t *testing.T, b *Backend, id sandbox.ID) int {
	t.Helper()
	bx, _ := b.lookup(id)
	data, err := os.ReadFile(bx.diskPath("workspace", "log"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Fields(string(data))
	for i, l := range lines {
		if l != strconv.Itoa(i+1) {
			t.Fatalf("counter log line %d = %q: the counter restarted or lost its file", i+1, l)
		}
	}
	return len(lines)
}

// TestPauseResume: pause freezes every process (the counter stops, the
// freezer says frozen, the state says paused); resume thaws the same
// processes, which go on from where they were with their memory and open
// file; pausing and resuming twice is harmless.
func TestPauseResume(t *testing.T) {
	testutil.RequireRoot(t)
	b := newTestBackend(t, testutil.ShortTempDir(t))
	ctx := ctxT(t)
	info := backendtest.Create(t, b, sandbox.Spec{Template: sandbox.HostTemplate()})
	if !b.Capabilities().Pause {
		t.Fatal("Capabilities().Pause is false for a root native backend")
	}
	startCounter(t, b, info)
	pidsBefore := sandboxPids(t, b, info.ID)

	if err := b.Pause(ctx, info.ID); err != nil {
		t.Fatalf("pause: %v", err)
	}
	if err := b.Pause(ctx, info.ID); err != nil {
		t.Fatalf("pause a paused sandbox: %v", err)
	}
	wantFreezer(t, b, info.ID, true)
	if in, err := b.Inspect(ctx, info.ID); err != nil || in.State != sandbox.StatePaused {
		t.Fatalf("inspect paused = %+v, %v", in, err)
	}
	frozenAt := hostCounter(t, b, info.ID)
	// Frozen: not one more step however long we look (a counter that moved
	// at all would be a process the freezer missed).
	for i := 0; i < 10; i++ {
		time.Sleep(30 * time.Millisecond)
		if n := hostCounter(t, b, info.ID); n != frozenAt {
			t.Fatalf("counter moved from %d to %d while paused", frozenAt, n)
		}
	}
	if got := sandboxPids(t, b, info.ID); !slices.Equal(got, pidsBefore) {
		t.Fatalf("pids while paused %v, before %v", got, pidsBefore)
	}

	if err := b.Resume(ctx, info.ID); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if err := b.Resume(ctx, info.ID); err != nil {
		t.Fatalf("resume a running sandbox: %v", err)
	}
	wantFreezer(t, b, info.ID, false)
	waitCounter(t, b, info.ID, frozenAt+2)
	if got := sandboxPids(t, b, info.ID); !slices.Equal(got, pidsBefore) {
		t.Fatalf("pids after resume %v, before %v", got, pidsBefore)
	}
	if n := checkLog(t, b, info.ID); n < frozenAt+2 {
		t.Fatalf("log has %d lines, want more than %d", n, frozenAt+2)
	}
	if r := backendtest.Exec(t, backendtest.Client(t, info, ""), "echo alive"); r.Stdout != "alive\n" {
		t.Fatalf("exec after resume: %+v", r)
	}
}

// TestPauseRecoverDestroy: a paused sandbox stays paused across a
// daemon restart (a new backend over the same state), resumes there with
// the same processes, and a paused sandbox is destroyed without leaving a
// process, a cgroup or a D-state task behind.
func TestPauseRecoverDestroy(t *testing.T) {
	testutil.RequireRoot(t)
	dir := testutil.ShortTempDir(t)
	b1 := newTestBackend(t, dir)
	ctx := ctxT(t)
	kept := backendtest.Create(t, b1, sandbox.Spec{Template: sandbox.HostTemplate()})
	startCounter(t, b1, kept)
	if err := b1.Pause(ctx, kept.ID); err != nil {
		t.Fatal(err)
	}
	frozenAt := hostCounter(t, b1, kept.ID)
	pids := sandboxPids(t, b1, kept.ID)

	b1.abandoned.Store(true)
	b2 := newTestBackend(t, dir)
	t.Cleanup(func() { b2.Destroy(context.Background(), kept.ID) })
	infos, err := b2.Recover(ctx)
	if err != nil {
		t.Fatalf("recover: %v", err)
	}
	if len(infos) != 1 || infos[0].ID != kept.ID || infos[0].State != sandbox.StatePaused {
		t.Fatalf("recovered %+v, want %s paused", infos, kept.ID)
	}
	wantFreezer(t, b2, kept.ID, true)
	if n := hostCounter(t, b2, kept.ID); n != frozenAt {
		t.Fatalf("counter moved from %d to %d across the restart", frozenAt, n)
	}
	if err := b2.Resume(ctx, kept.ID); err != nil {
		t.Fatalf("resume after restart: %v", err)
	}
	waitCounter(t, b2, kept.ID, frozenAt+2)
	if got := sandboxPids(t, b2, kept.ID); !slices.Equal(got, pids) {
		t.Fatalf("pids after restart and resume %v, before %v", got, pids)
	}
	checkLog(t, b2, kept.ID)

	// Destroy while paused.
	if err := b2.Pause(ctx, kept.ID); err != nil {
		t.Fatal(err)
	}
	bx, _ := b2.lookup(kept.ID)
	cgDirs := b2.cgroupPaths(bx)
	start := time.Now()
	if err := b2.Destroy(ctx, kept.ID); err != nil {
		t.Fatalf("destroy paused: %v", err)
	}
	t.Logf("destroy of a paused sandbox took %s", time.Since(start))
	for _, pid := range pids {
		if err := unix.Kill(pid, 0); err == nil {
			st, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
			t.Errorf("sandbox process %d survived its destroy: %s", pid, st)
		}
	}
	for ctrl, d := range cgDirs {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("cgroup %s (%s) left after destroying a paused sandbox", d, ctrl)
		}
	}
}

// anonHolder keeps 48 MiB of random bytes, writes their hash, and writes
// it again once /workspace/anon-go exists.
const anonHolder = `import hashlib, os, time
b = bytearray(os.urandom(48 << 20))
open("/workspace/anon-before.tmp", "w").write(hashlib.sha256(b).hexdigest())
os.rename("/workspace/anon-before.tmp", "/workspace/anon-before")
while not os.path.exists("/workspace/anon-go"):
    time.sleep(0.02)
open("/workspace/anon-after.tmp", "w").write(hashlib.sha256(b).hexdigest())
os.rename("/workspace/anon-after.tmp", "/workspace/anon-after")
`

// TestPauseMemory: while paused the sandbox's memory is the kernel's
// first choice to reclaim (v1 soft limit 0, restored on resume), and with
// PauseReclaim its page cache is reclaimed at once — while a file it
// wrote and the memory of its processes (anonymous memory, which stays
// charged without swap) are all still there on resume.
func TestPauseMemory(t *testing.T) {
	testutil.RequireRoot(t)
	b, err := New(Config{Root: testutil.ShortTempDir(t), AgentPath: testutil.AgentBinary(t), PauseReclaim: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.abandoned.Store(true); b.Close() })
	ctx := ctxT(t)
	info := backendtest.Create(t, b, sandbox.Spec{Template: sandbox.HostTemplate()})
	t.Cleanup(func() { b.Destroy(context.Background(), info.ID) })
	c := backendtest.Client(t, info, "")
	// 64 MiB of clean page cache: written, then synced.
	if r := backendtest.Exec(t, c, "head -c 67108864 /dev/urandom > /workspace/big && sync && md5sum /workspace/big"); r.Exit.ExitCode != 0 {
		t.Fatalf("write file: %+v", r)
	}
	sum := backendtest.Exec(t, c, "md5sum /workspace/big").Stdout
	startCounter(t, b, info)
	// 48 MiB of anonymous memory (random bytes in a Python process): not
	// reclaimable without swap, and the same bytes after resume.
	holder, err := c.Start(ctx, agentclient.StartOptions{Cmd: "python3", Args: []string{"-c", anonHolder}})
	if err != nil {
		t.Fatal(err)
	}
	holder.Close()
	bx0, _ := b.lookup(info.ID)
	waitFile := func(name string) string {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			if data, err := os.ReadFile(bx0.diskPath("workspace", name)); err == nil && len(data) > 0 {
				return string(data)
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("no %s from the memory holder", name)
		return ""
	}
	anonSum := waitFile("anon-before")
	bx, _ := b.lookup(info.ID)
	p := b.cgroupPaths(bx)
	usage := func() int64 {
		if isCgroup2() {
			return cgroupfs.ReadInt(filepath.Join(p[""], "memory.current"))
		}
		return cgroupfs.ReadInt(filepath.Join(p["memory"], "memory.usage_in_bytes"))
	}
	before := usage()
	if err := b.Pause(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	after := usage()
	t.Logf("sandbox memory: %d MiB before pause, %d MiB paused", before>>20, after>>20)
	if before-after < 32<<20 {
		t.Errorf("pause reclaimed %d KiB of a sandbox holding 64 MiB of clean page cache", (before-after)>>10)
	}
	if after < 48<<20 {
		t.Errorf("%d MiB charged while paused: less than the 48 MiB of anonymous memory it holds (no swap here: where did it go?)", after>>20)
	}
	if !isCgroup2() {
		if soft := cgroupfs.ReadInt(filepath.Join(p["memory"], "memory.soft_limit_in_bytes")); soft != 0 {
			t.Errorf("soft limit while paused = %d, want 0", soft)
		}
	}
	frozenAt := hostCounter(t, b, info.ID)
	if err := b.Resume(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if !isCgroup2() {
		if soft := cgroupfs.ReadInt(filepath.Join(p["memory"], "memory.soft_limit_in_bytes")); soft < 1<<40 {
			t.Errorf("soft limit after resume = %d, want unlimited", soft)
		}
	}
	waitCounter(t, b, info.ID, frozenAt+1)
	checkLog(t, b, info.ID)
	backendtest.Exec(t, c, "touch /workspace/anon-go")
	if got := waitFile("anon-after"); got != anonSum {
		t.Fatalf("anonymous memory after pause and resume hashes to %s, was %s", got, anonSum)
	}
	if got := backendtest.Exec(t, c, "md5sum /workspace/big").Stdout; got != sum {
		t.Fatalf("file after reclaim and resume: %q, want %q", got, sum)
	}
	if n := b.oomKills(bx); n != 0 {
		t.Fatalf("%d OOM kills in the paused sandbox", n)
	}
}

// TestSnapshotPaused: a paused sandbox is snapshotted as it is and stays
// frozen (the snapshot's own short freeze must not thaw it).
func TestSnapshotPaused(t *testing.T) {
	testutil.RequireRoot(t)
	b := newTestBackend(t, testutil.ShortTempDir(t))
	ctx := ctxT(t)
	info := backendtest.Create(t, b, sandbox.Spec{Template: imageTemplate(imageLayers(t), sandbox.ImageConfig{}), WritableRoot: true, Root: true})
	if r := backendtest.Exec(t, backendtest.Client(t, info, ""), "echo paused > /etc/paused-file"); r.Exit.ExitCode != 0 {
		t.Fatalf("write: %+v", r)
	}
	if err := b.Pause(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	var tarball bytes.Buffer
	if err := b.SnapshotDiff(ctx, info.ID, &tarball); err != nil {
		t.Fatalf("snapshot of a paused sandbox: %v", err)
	}
	if !bytes.Contains(tarball.Bytes(), []byte("paused-file")) {
		t.Fatal("the snapshot layer lacks the paused sandbox's file")
	}
	wantFreezer(t, b, info.ID, true)
	if in, _ := b.Inspect(ctx, info.ID); in.State != sandbox.StatePaused {
		t.Fatalf("state after snapshot = %q", in.State)
	}
	if err := b.Resume(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	wantFreezer(t, b, info.ID, false)
}

// parentPid is pid's parent, from /proc/pid/stat (0 when it is gone).
func parentPid(pid int) int {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// pid (comm) state ppid ...: comm may hold spaces, so cut at its end.
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}
