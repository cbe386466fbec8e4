package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testutil"
)

// uploadRandom writes n random bytes to path in sandbox id.
func uploadRandom(t *testing.T, d *daemon, key, id, path string, n int) {
	t.Helper()
	data := make([]byte, n)
	rand.Read(data)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := d.sdk(t, key).Upload(ctx, id, path, bytes.NewReader(data), int64(n), nil); err != nil {
		t.Fatalf("upload %s to %s: %v", path, id, err)
	}
}

// storeState is what a refused snapshot must leave as it was: the
// template names a user sees, the store's layers, and an empty tmp/.
func storeState(t *testing.T, d *daemon, key string) string {
	t.Helper()
	var names []string
	for _, l := range listTemplates(t, d, key) {
		names = append(names, fmt.Sprintf("%v:%v", l["name"], l["tag"]))
	}
	slices.Sort(names)
	layers, _ := os.ReadDir(filepath.Join(d.dataDir, "templates", "layers"))
	tmp, _ := os.ReadDir(filepath.Join(d.dataDir, "templates", "tmp"))
	return fmt.Sprintf("templates %v, %d layers, %d in tmp/", names, len(layers), len(tmp))
}

// TestSecuritySnapshotQuota: a tenant that snapshots its sandbox again and
// again under fresh names fills its own storage quota
// (STORAGE_QUOTA_PER_USER), not the store every tenant shares: each
// snapshot stores its layer once (not also a compressed copy), the one
// past the quota is refused with 429 quota_exceeded and stores nothing,
// another tenant still creates sandboxes and snapshots, and deleting a
// snapshot frees quota.
func TestSecuritySnapshotQuota(t *testing.T) {
	const op, carol, dave = "op-key-quota", "carol-key-quota", "dave-key-quota"
	const chunk = 6 << 20 // written anew before every snapshot
	tr := newTokenRegistry(t)
	tr.push(t, "team/quota:v1", runnableImage(t, "quota-base"))
	d := startDaemon(t, tr.authSetting(), "API_KEYS="+op+":op,"+carol+":carol,"+dave+":dave",
		"TEMPLATE_ADMIN_USERS=op", "STORAGE_QUOTA_PER_USER=24M")
	if status, data := d.call(t, "POST", "/v1/templates/pulls", op, map[string]any{"image": tr.host + "/team/quota:v1", "name": "base-img"}); status/100 != 2 {
		t.Fatalf("pull: %d %s", status, data)
	}
	store := filepath.Join(d.dataDir, "templates")
	sb := createFrom(t, d, carol, "base-img")
	defer deleteSandbox(t, d, carol, sb)

	stored := 0
	for i := 1; i <= 8 && stored == i-1; i++ {
		uploadRandom(t, d, carol, sb, "/srv/app/big", chunk)
		before, state := duBytes(t, store), storeState(t, d, carol)
		status, data := d.call(t, "POST", "/v1/sandboxes/"+sb+"/snapshot", carol, map[string]any{"name": fmt.Sprintf("s%d", i)})
		growth := duBytes(t, store) - before
		switch {
		case status == 201:
			stored++
			t.Logf("snapshot %d of a sandbox with %d MiB written: the store grew by %.1f MiB", i, chunk>>20, float64(growth)/(1<<20))
			// One copy of the layer (the unpacked files), not also a
			// compressed blob of incompressible data.
			if growth > chunk*3/2 {
				t.Errorf("snapshot %d grew the store by %d bytes for %d bytes of files: more than one copy", i, growth, chunk)
			}
		case status == 429 && mustJSON(t, data)["code"] == "quota_exceeded":
			t.Logf("snapshot %d refused: %s", i, data)
			if after := storeState(t, d, carol); after != state || growth > 64<<10 {
				t.Errorf("the refused snapshot changed the store: %s -> %s, %d bytes more", state, after, growth)
			}
		default:
			t.Fatalf("snapshot %d: %d %s, want 201 or 429 quota_exceeded", i, status, data)
		}
	}
	if stored == 8 {
		t.Fatalf("8 snapshots of %d MiB each under fresh names were all stored: no quota on a tenant's snapshots", chunk>>20)
	}
	// 24 MiB hold three 6 MiB layers, not four.
	if stored != 3 {
		t.Errorf("%d snapshots of %d MiB fitted a 24 MiB quota, want 3", stored, chunk>>20)
	}

	// Another tenant is not refused: it creates a sandbox and snapshots.
	other := createFrom(t, d, dave, "base-img")
	defer deleteSandbox(t, d, dave, other)
	uploadRandom(t, d, dave, other, "/srv/app/big", chunk)
	if status, data := d.call(t, "POST", "/v1/sandboxes/"+other+"/snapshot", dave, map[string]any{"name": "mine"}); status != 201 {
		t.Fatalf("another tenant's snapshot while carol is at her quota: %d %s", status, data)
	}

	// Deleting one of carol's snapshots frees her quota.
	first := mustJSON(t, mustCall(t, d, "GET", "/v1/templates", carol))
	var firstName string
	for _, l := range first["templates"].([]any) {
		if n := l.(map[string]any)["name"].(string); filepath.Base(n) == "s1" {
			firstName = n
		}
	}
	if firstName == "" {
		t.Fatalf("carol's s1 is not in her list: %v", first)
	}
	if status, data := d.call(t, "DELETE", "/v1/templates/"+url.PathEscape(firstName), carol, nil); status != 204 {
		t.Fatalf("carol deletes her snapshot: %d %s", status, data)
	}
	uploadRandom(t, d, carol, sb, "/srv/app/big", chunk)
	if status, data := d.call(t, "POST", "/v1/sandboxes/"+sb+"/snapshot", carol, map[string]any{"name": "again"}); status != 201 {
		t.Errorf("carol's snapshot after deleting one: %d %s", status, data)
	}
}

// mustCall is d.call that fails the test on an error status.
func mustCall(t *testing.T, d *daemon, method, path, key string) []byte {
	t.Helper()
	status, data := d.call(t, method, path, key, nil)
	if status >= 300 {
		t.Fatalf("%s %s: %d %s", method, path, status, data)
	}
	return data
}

// TestSecuritySnapshotDiskReserve: snapshots never take the data dir's
// filesystem (shared with every sandbox disk and the state database)
// below DISK_RESERVE: with room for less than its layer above the
// reserve a snapshot is stopped midway, with none at all it is refused at
// once, both with 507 insufficient_space and nothing stored; with room it
// goes through.
func TestSecuritySnapshotDiskReserve(t *testing.T) {
	testutil.RequireRoot(t)
	const op = "op-key-reserve"
	const reserve = 256 << 20
	dataDir := testutil.ShortTempDir(t)
	// A filesystem of the test's own: only this daemon and the test's
	// ballast take its space.
	if err := unix.Mount("tmpfs", dataDir, "tmpfs", 0, "size=1g,mode=0711"); err != nil {
		t.Fatalf("mount a small data dir: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dataDir, 0); err != nil {
			t.Errorf("unmount the test's data dir: %v", err)
			_ = unix.Unmount(dataDir, unix.MNT_DETACH)
		}
	})
	tr := newTokenRegistry(t)
	tr.push(t, "team/reserve:v1", runnableImage(t, "reserve-base"))
	d := startDaemonIn(t, dataDir, tr.authSetting(), "BEARER_TOKEN="+op, fmt.Sprintf("DISK_RESERVE=%d", reserve))
	if status, data := d.call(t, "POST", "/v1/templates/pulls", op, map[string]any{"image": tr.host + "/team/reserve:v1", "name": "base-img"}); status/100 != 2 {
		t.Fatalf("pull: %d %s", status, data)
	}
	status, data := d.call(t, "POST", "/v1/sandboxes", op, map[string]any{"template": "base-img", "resources": map[string]any{"disk": 128 << 20}})
	if status != 201 && status != 200 {
		t.Fatalf("create: %d %s", status, data)
	}
	sb, _ := mustJSON(t, data)["id"].(string)
	defer deleteSandbox(t, d, op, sb)
	// On the sandbox's own disk, whose blocks are reserved already.
	uploadRandom(t, d, op, sb, "/srv/app/big", 48<<20)

	free := func() int64 {
		var st unix.Statfs_t
		if err := unix.Statfs(dataDir, &st); err != nil {
			t.Fatal(err)
		}
		return int64(st.Bavail) * st.Bsize
	}
	ballast := filepath.Join(dataDir, "ballast")
	defer os.Remove(ballast)
	grow := func(n int64) {
		t.Helper()
		f, err := os.OpenFile(ballast, os.O_WRONLY|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		fi, _ := f.Stat()
		if err := unix.Fallocate(int(f.Fd()), 0, fi.Size(), n); err != nil {
			t.Fatalf("ballast: %v", err)
		}
	}
	// 24 MiB above the reserve for a 48 MiB layer: stopped midway.
	grow(free() - reserve - 24<<20)
	state := storeState(t, d, op)
	status, data = d.call(t, "POST", "/v1/sandboxes/"+sb+"/snapshot", op, map[string]any{"name": "big"})
	if status != 507 || mustJSON(t, data)["code"] != "insufficient_space" {
		t.Fatalf("a 48 MiB snapshot with 24 MiB above DISK_RESERVE: %d %s, want 507 insufficient_space", status, data)
	}
	t.Logf("stopped: %s", data)
	if after := storeState(t, d, op); after != state {
		t.Errorf("the stopped snapshot changed the store: %s -> %s", state, after)
	}
	if got := free(); got < reserve {
		t.Errorf("%d bytes free after the stopped snapshot, below the %d reserve", got, reserve)
	}
	// Nothing above the reserve: refused before it starts.
	grow(free() - reserve + 1<<20)
	status, data = d.call(t, "POST", "/v1/sandboxes/"+sb+"/snapshot", op, map[string]any{"name": "big"})
	if status != 507 || mustJSON(t, data)["code"] != "insufficient_space" {
		t.Fatalf("a snapshot within DISK_RESERVE: %d %s, want 507 insufficient_space", status, data)
	}
	if after := storeState(t, d, op); after != state {
		t.Errorf("the refused snapshot changed the store: %s -> %s", state, after)
	}
	// Room again: it goes through.
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	if status, data := d.call(t, "POST", "/v1/sandboxes/"+sb+"/snapshot", op, map[string]any{"name": "big"}); status != 201 {
		t.Errorf("the snapshot with room: %d %s", status, data)
	}
}
