package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/loadtest"
)

// Fault tests: what must hold after the daemon, a sandbox or the host
// misbehaves. Already covered elsewhere and not repeated here: a sandbox's
// agent killed from the host (TestSecurityAgentDeathIsReported), SIGKILL
// and SIGTERM of an idle daemon (TestRestartWithoutAutoCleanupReattaches),
// one sandbox's disk, /tmp, memory and pids caps (native
// TestSecurityEscapes), disk admission (TestSecurityDiskAdmission).

// waitGone waits (bounded) until no process of the sandboxes remains.
func waitGone(t *testing.T, ids ...string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for left := sandboxProcessList(ids...); len(left) != 0; left = sandboxProcessList(ids...) {
		if time.Now().After(deadline) {
			t.Fatalf("processes of %v left: %q", ids, left)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// randomFile writes n random bytes at path in the sandbox and returns
// their hash.
func randomFile(t *testing.T, c *client.Client, id, path string, n int) string {
	t.Helper()
	data := make([]byte, n)
	r := rand.New(rand.NewPCG(uint64(n), 7))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	if _, err := c.Upload(context.Background(), id, path, strings.NewReader(string(data)), int64(n), nil); err != nil {
		t.Fatalf("upload %s: %v", path, err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// fileHash reads path back from the sandbox and hashes it.
func fileHash(t *testing.T, c *client.Client, id, path string) string {
	t.Helper()
	rd, _, err := c.Download(context.Background(), id, path)
	if err != nil {
		t.Fatalf("download %s from %s: %v", path, id, err)
	}
	defer rd.Close()
	h := sha256.New()
	if _, err := io.Copy(h, rd); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// treeHashes hashes every regular file under dir (relative path -> hash).
func treeHashes(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(data)
		rel, _ := filepath.Rel(dir, p)
		out[rel] = hex.EncodeToString(sum[:])
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// checkEveryRecordUsable: every sandbox the daemon lists works (exec) or is
// stopped and starts; no record points at nothing. It returns the IDs.
func checkEveryRecordUsable(t *testing.T, c *client.Client) []string {
	t.Helper()
	ctx := context.Background()
	var ids []string
	for sb, err := range c.ListAll(ctx, client.ListOptions{}) {
		if err != nil {
			t.Fatalf("list: %v", err)
		}
		ids = append(ids, sb.ID)
		if sb.State == "stopped" {
			continue // the caller starts the ones it checks
		}
		ectx, cancel := context.WithTimeout(ctx, time.Minute)
		res, err := c.Exec(ectx, sb.ID, client.ExecRequest{Cmd: []string{"echo", "alive"}})
		cancel()
		if err != nil || res.Stdout != "alive\n" {
			t.Errorf("listed sandbox %s (%s) does not work: %+v %v", sb.ID, sb.State, res, err)
		}
	}
	return ids
}

// TestFaultKillDuringLoad kills the daemon (SIGKILL) in the middle of the
// load, then restarts it: the clients got errors, never a hang and never
// wrong data; every sandbox is reattached and working (AUTO_CLEANUP=false
// keeps them); a stopped sandbox's workspace and the agentscope storage
// are byte-for-byte what they were; no host object belongs to a sandbox
// the daemon does not list.
func TestFaultKillDuringLoad(t *testing.T) {
	storage := filepath.Join(sharedTempDir(t), "storage")
	d, tg := loadDaemon(t, "10.83.0.0/16", "AUTO_CLEANUP=false", "STORAGE_FOLDER="+storage, "MAX_SANDBOXES_PER_USER=12")
	c := d.sdk(t, asToken)
	ctx := context.Background()

	// Persisted state: a stopped sandbox with a file, and an agentscope
	// workspace copied to storage on release.
	stopped, err := c.Create(ctx, client.CreateRequest{Timeout: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	wantStopped := randomFile(t, c, stopped.ID, "/workspace/keep.bin", 3<<20)
	if status, data := d.call(t, "POST", "/v1/sandboxes/"+stopped.ID+"/stop", asToken, map[string]any{}); status != 200 {
		t.Fatalf("stop: %d %s", status, data)
	}
	_, body := asCall(t, d, "create", asToken, map[string]any{"sandbox_type": "base"})
	asID, _ := body["data"].(string)
	if asID == "" {
		t.Fatalf("agentscope create: %v", body)
	}
	if status, data := d.call(t, "PUT", "/proxy/"+asID+"/workspace/file?path=notes/a.txt", asToken, "persist me"); status != 200 {
		t.Fatalf("agentscope write: %d %s", status, data)
	}
	if status, body := asCall(t, d, "release", asToken, map[string]any{"identity": asID}); status != 200 || body["data"] != true {
		t.Fatalf("release: %d %v", status, body)
	}
	wantStorage := treeHashes(t, storage)
	if len(wantStorage) == 0 {
		t.Fatal("release copied nothing to STORAGE_FOLDER")
	}

	// Load, and SIGKILL in the middle of it.
	var res *loadtest.Result
	var runErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		res, runErr = loadtest.Run(ctx, loadtest.Config{URL: d.url, APIKey: asToken, AgentscopeToken: asToken,
			Clients: 6, Duration: 20 * time.Second, MaxFileBytes: 8 << 20, OpTimeout: 45 * time.Second, Seed: 5})
	}()
	time.Sleep(8 * time.Second)
	d.kill()
	select {
	case <-done:
	case <-time.After(3 * time.Minute):
		t.Fatal("load clients hung after the daemon was killed")
	}
	if runErr != nil {
		t.Fatal(runErr)
	}
	res.Report(testWriter{t})
	for kind, n := range res.Errors {
		if kind != "transport" && !loadtest.Expected(kind) {
			t.Errorf("%d errors of kind %s: a killed daemon must cost connections, not wrong answers", n, kind)
		}
	}

	d.start()
	tg.PID, tg.URL = d.cmd.Process.Pid, d.url
	c = d.sdk(t, asToken)
	ids := checkEveryRecordUsable(t, c)
	if status, data := d.call(t, "POST", "/v1/sandboxes/"+stopped.ID+"/start", asToken, map[string]any{}); status != 200 {
		t.Fatalf("start the stopped sandbox after the crash: %d %s", status, data)
	}
	if got := fileHash(t, c, stopped.ID, "/workspace/keep.bin"); got != wantStopped {
		t.Errorf("stopped sandbox's workspace changed across the crash")
	}
	// Rounds of the load released workspaces to storage too: every file
	// stored before the crash must be there, unchanged.
	got := treeHashes(t, storage)
	for p, h := range wantStorage {
		if got[p] != h {
			t.Errorf("agentscope storage %s changed across the crash (hash %q, was %q)", p, got[p], h)
		}
	}
	// Every sandbox on the host is one the daemon lists or one of its pool.
	snap, err := loadtest.Take(ctx, tg)
	if err != nil {
		t.Fatal(err)
	}
	unknown := 0
	for _, id := range snap.Sandboxes {
		if !slices.Contains(ids, id) {
			unknown++
		}
	}
	if unknown > 2 { // POOL_SIZE=2
		t.Errorf("%d sandboxes on the host the daemon does not list (pool 2): host %v, listed %v", unknown, snap.Sandboxes, ids)
	}
	for _, id := range ids {
		if err := c.Delete(ctx, id); err != nil && !client.IsNotFound(err) {
			t.Errorf("delete %s: %v", id, err)
		}
	}
	waitGone(t, ids...)
	restartCleaning(t, d)
}

// restartCleaning restarts a daemon that keeps sandboxes across restarts
// with AUTO_CLEANUP=true, so that its stop at cleanup destroys what is
// left (the warm pool's sandboxes).
func restartCleaning(t *testing.T, d *daemon) {
	t.Helper()
	d.stop()
	d.env = append(d.env, "AUTO_CLEANUP=true")
	d.start()
}

// sharedTempDir is a fresh directory under /tmp, traversable by
// sandbox users, removed at cleanup.
func sharedTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "abxf")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// TestFaultStoreDamaged damages the store file while the daemon is
// stopped: the daemon starts anyway, says what it did (and keeps the
// damaged file), reattaches the sandboxes whose records still read, and
// destroys the ones whose records are lost (nothing left on the host).
func TestFaultStoreDamaged(t *testing.T) {
	for _, how := range []string{"record", "truncated", "garbage"} {
		t.Run(how, func(t *testing.T) {
			d := startDaemon(t, "AUTO_CLEANUP=false", "API_KEYS=k1:alice")
			c := d.sdk(t, "k1")
			ctx := context.Background()
			var ids []string
			for range 3 {
				sb, err := c.Create(ctx, client.CreateRequest{})
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, sb.ID)
				if _, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"/bin/sh", "-c", "echo " + sb.ID + " > /workspace/id"}}); err != nil {
					t.Fatal(err)
				}
			}
			d.stop()
			path := filepath.Join(d.dataDir, "agentbox.db")
			switch how {
			case "record":
				db, err := bolt.Open(path, 0o600, nil)
				if err != nil {
					t.Fatal(err)
				}
				err = db.Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte("sandboxes")).Put([]byte(ids[1]), []byte(`{"id":`)) })
				db.Close()
				if err != nil {
					t.Fatal(err)
				}
			case "truncated":
				fi, err := os.Stat(path)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.Truncate(path, fi.Size()/2); err != nil {
					t.Fatal(err)
				}
			case "garbage":
				data, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				r := rand.New(rand.NewPCG(3, 4))
				for i := 2 * 4096; i < len(data); i++ {
					data[i] = byte(r.Uint32())
				}
				if err := os.WriteFile(path, data, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			d.start() // fails the test unless the daemon becomes ready
			logs := d.logs.String()
			if !strings.Contains(logs, "store") || !(strings.Contains(logs, "damaged") || strings.Contains(logs, "do not decode")) {
				t.Errorf("the daemon did not say what it did with the damaged store:\n%s", lastLines(logs, 30))
			}
			kept, _ := filepath.Glob(path + ".*")
			if len(kept) == 0 {
				t.Errorf("no copy of the damaged store was kept")
			}
			c = d.sdk(t, "k1")
			var lost []string
			for _, id := range ids {
				sb, err := c.Get(ctx, id)
				if client.IsNotFound(err) {
					lost = append(lost, id)
					continue
				}
				if err != nil {
					t.Fatalf("get %s: %v", id, err)
				}
				res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"cat", "/workspace/id"}})
				if err != nil || res.Stdout != id+"\n" {
					t.Errorf("reattached sandbox %s: %+v %v", id, res, err)
				}
			}
			if how == "record" && (len(lost) != 1 || lost[0] != ids[1]) {
				t.Errorf("one damaged record: lost %v, want only %s", lost, ids[1])
			}
			t.Logf("%s: %d of %d sandboxes reattached", how, len(ids)-len(lost), len(ids))
			waitGone(t, lost...)
			for _, id := range ids {
				if !slices.Contains(lost, id) {
					c.Delete(ctx, id)
				}
			}
			waitGone(t, ids...)
		})
	}
}

// TestFaultDataDirFull runs the daemon on a small filesystem of its own
// and fills it: creating a sandbox fails with a clear error (and does not
// hang), the sandbox already running keeps working, and once space
// returns creation works again.
func TestFaultDataDirFull(t *testing.T) {
	for _, tool := range []string{"mkfs.ext4", "mount", "umount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s", tool)
		}
	}
	base := sharedTempDir(t)
	img, mnt := filepath.Join(base, "fs.img"), filepath.Join(base, "data")
	if err := os.Mkdir(mnt, 0o711); err != nil {
		t.Fatal(err)
	}
	// 4 GiB (sparse): room for one sandbox's default 1 GiB disk next to
	// the daemon's 1 GiB reserve.
	if err := os.Truncate(filepathCreate(t, img), 4<<30); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs: %v %s", err, out)
	}
	if out, err := exec.Command("mount", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount: %v %s", err, out)
	}
	t.Cleanup(func() { // after the daemon stopped (cleanups run in reverse)
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount: %v %s", err, out)
		}
	})
	os.Chmod(mnt, 0o711)
	d := startDaemonIn(t, mnt, "AUTO_CLEANUP=true")
	c := d.sdk(t, "")
	ctx := context.Background()
	running, err := c.Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want := randomFile(t, c, running.ID, "/workspace/before.bin", 1<<20)

	// Fill the filesystem: fallocate what any user may use, then write
	// zeroes until ENOSPC, since the daemon is root and ext4's reserved
	// blocks are its too.
	var st syscall.Statfs_t
	if err := syscall.Statfs(mnt, &st); err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(mnt, "filler")
	free := int64(st.Bavail) * st.Bsize
	if out, err := exec.Command("fallocate", "-l", fmt.Sprint(free-4<<20), filler).CombinedOutput(); err != nil {
		t.Fatalf("fallocate: %v %s", err, out)
	}
	// Each dd ends with ENOSPC; blocks are counted once written back.
	_ = exec.Command("sh", "-c", "dd if=/dev/zero of="+filler+"2 bs=1M; sync; dd if=/dev/zero of="+filler+"3 bs=4k; sync").Run()
	// ext4 keeps ~16 MiB of reserved clusters that no file data can use.
	if err := syscall.Statfs(mnt, &st); err != nil || st.Bfree*uint64(st.Bsize) > 32<<20 {
		t.Fatalf("the filesystem is not full: %d bytes free (%v)", st.Bfree*uint64(st.Bsize), err)
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	_, err = c.Create(cctx, client.CreateRequest{})
	cancel()
	var ae *client.Error
	if err == nil {
		t.Fatal("create succeeded on a full data dir")
	}
	if !errors.As(err, &ae) || ae.Status >= 500 && ae.Code != client.CodeInsufficientSpace && ae.Code != client.CodeUnavailable {
		t.Errorf("create on a full data dir: %v, want a clear insufficient_space error", err)
	}
	if ae != nil && !strings.Contains(strings.ToLower(ae.Message), "space") {
		t.Errorf("create on a full data dir says %q: it should say space ran out", ae.Message)
	}
	t.Logf("create on a full data dir: %v", err)
	res, err := c.Exec(ctx, running.ID, client.ExecRequest{Cmd: []string{"echo", "still here"}})
	if err != nil || res.Stdout != "still here\n" {
		t.Fatalf("running sandbox harmed by a full data dir: %+v %v", res, err)
	}
	if got := fileHash(t, c, running.ID, "/workspace/before.bin"); got != want {
		t.Fatal("running sandbox's file changed")
	}

	// The running sandbox keeps writing: its disk was promised, so the
	// write either works and survives, or fails loudly; it is never
	// reported done and then lost on its way to the full filesystem.
	w, err := c.Exec(ctx, running.ID, client.ExecRequest{Cmd: []string{"/bin/sh", "-c",
		"head -c 20000000 /dev/urandom > /workspace/during && sync && sha256sum < /workspace/during"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("write during the full data dir: exit %d, %q", w.ExitCode, w.Stderr)
	for _, f := range []string{filler, filler + "2", filler + "3"} {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	if w.ExitCode == 0 {
		// Read it back from the disk, not from the page cache.
		exec.Command("sh", "-c", "sync; echo 3 > /proc/sys/vm/drop_caches").Run()
		r, err := c.Exec(ctx, running.ID, client.ExecRequest{Cmd: []string{"/bin/sh", "-c", "sha256sum < /workspace/during"}})
		if err != nil || r.ExitCode != 0 || r.Stdout != w.Stdout {
			t.Fatalf("a write reported done while the data dir was full was lost: then %q, now %+v %v", w.Stdout, r, err)
		}
	}
	again, err := c.Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatalf("create after space returned: %v", err)
	}
	for _, id := range []string{again.ID, running.ID} {
		if err := c.Delete(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
}

func filepathCreate(t *testing.T, p string) string {
	t.Helper()
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	return p
}

// TestFaultNoisyNeighbour: one sandbox fills its disk, its /tmp, its
// memory and its pids, with processes that ignore SIGTERM, while its
// neighbour keeps working (exec, files); destroying the noisy one ends
// every one of its processes.
func TestFaultNoisyNeighbour(t *testing.T) {
	d := startDaemon(t, "AUTO_CLEANUP=true")
	c := d.sdk(t, "")
	ctx := context.Background()
	noisy, err := c.Create(ctx, client.CreateRequest{Resources: &client.Resources{MemoryBytes: 128 << 20, PIDs: 64, DiskBytes: 256 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	quiet, err := c.Create(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	abuse := `
for i in 1 2 3; do (trap '' TERM; while :; do sleep 1; done) & done
dd if=/dev/zero of=/workspace/fill bs=1M count=400 2>/dev/null
dd if=/dev/zero of=/tmp/fill bs=1M count=400 2>/dev/null
python3 -c 'b = []
while True: b.append(bytearray(16 << 20))' 2>/dev/null &
f() { f | f & }; (f) 2>/dev/null &
sleep 20`
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		actx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		_, _ = c.Exec(actx, noisy.ID, client.ExecRequest{Cmd: []string{"/bin/bash", "-c", abuse}, Timeout: 30 * time.Second})
	}()
	time.Sleep(3 * time.Second) // the abuse is under way
	for i := range 10 {
		ectx, cancel := context.WithTimeout(ctx, time.Minute)
		res, err := c.Exec(ectx, quiet.ID, client.ExecRequest{Cmd: []string{"/bin/sh", "-c", fmt.Sprintf("echo %d > /tmp/n && cat /tmp/n", i)}})
		cancel()
		if err != nil || res.Stdout != fmt.Sprintf("%d\n", i) {
			t.Fatalf("neighbour exec %d during the abuse: %+v %v", i, res, err)
		}
		want := randomFile(t, c, quiet.ID, "/workspace/n.bin", 256<<10+i)
		if got := fileHash(t, c, quiet.ID, "/workspace/n.bin"); got != want {
			t.Fatalf("neighbour file %d read back wrong", i)
		}
	}
	if n := sandboxProcesses(t, noisy.ID); n < 3 {
		t.Errorf("the noisy sandbox runs %d processes: the abuse did not happen", n)
	}
	dctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	err = c.Delete(dctx, noisy.ID)
	cancel()
	if err != nil {
		t.Fatalf("destroy the noisy sandbox (processes ignore SIGTERM): %v", err)
	}
	waitGone(t, noisy.ID)
	wg.Wait()
	res, err := c.Exec(ctx, quiet.ID, client.ExecRequest{Cmd: []string{"echo", "ok"}})
	if err != nil || res.Stdout != "ok\n" {
		t.Fatalf("neighbour after the noisy one was destroyed: %+v %v", res, err)
	}
	if err := c.Delete(ctx, quiet.ID); err != nil {
		t.Fatal(err)
	}
}
