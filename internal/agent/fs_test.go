package agent_test

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"
	"time"

	"connectrpc.com/connect"

	fspb "github.com/agentbox/agentbox/api/proto/filesystem"
	"github.com/agentbox/agentbox/api/proto/filesystem/filesystemconnect"
	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/agent/agenttest"
	"github.com/agentbox/agentbox/internal/sandbox"
)

func TestStatAndEntryInfo(t *testing.T) {
	a, c := startAgent(t, agenttest.Options{})
	ctx := testCtx(t)
	f := filepath.Join(a.Workdir, "f.txt")
	if err := os.WriteFile(f, []byte("12345"), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(f, 0o644)
	mtime := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	_ = os.Chtimes(f, mtime, mtime)
	e, err := c.Stat(ctx, f, "")
	if err != nil {
		t.Fatal(err)
	}
	want := agentclient.EntryInfo{
		Name: "f.txt", Path: f, Type: agentclient.FileTypeFile, Size: 5, Mode: 0o644,
		Permissions: "-rw-r--r--", Owner: "root", Group: "root", ModTime: mtime,
	}
	if os.Geteuid() != 0 {
		want.Owner, want.Group = e.Owner, e.Group
	}
	if e != want {
		t.Errorf("stat\n got %+v\nwant %+v", e, want)
	}
	link := filepath.Join(a.Workdir, "link")
	if err := os.Symlink("f.txt", link); err != nil {
		t.Fatal(err)
	}
	e, err = c.Stat(ctx, link, "")
	if err != nil {
		t.Fatal(err)
	}
	if !e.IsSymlink || e.SymlinkTarget != "f.txt" || e.Type != agentclient.FileTypeFile || e.Permissions != "lrwxrwxrwx" {
		t.Errorf("symlink entry %+v", e)
	}
	if _, err := c.Stat(ctx, filepath.Join(a.Workdir, "missing"), ""); sandbox.ClassOf(err) != sandbox.ClassNotFound {
		t.Errorf("stat missing: %v", err)
	}
	// "~" is the user's home.
	home, _ := os.UserHomeDir()
	if e, err := c.Stat(ctx, "~", ""); err != nil || e.Path != filepath.Clean(home) {
		t.Errorf("stat ~: %+v %v (home %s)", e, err, home)
	}
}

func TestMakeDirMoveRemove(t *testing.T) {
	a, c := startAgent(t, agenttest.Options{})
	ctx := testCtx(t)
	d := filepath.Join(a.Workdir, "a/b/c")
	e, err := c.MakeDir(ctx, d, "")
	if err != nil || e.Type != agentclient.FileTypeDir || e.Path != d {
		t.Fatalf("make dir: %+v %v", e, err)
	}
	if _, err := c.MakeDir(ctx, d, ""); sandbox.ClassOf(err) != sandbox.ClassConflict {
		t.Errorf("make existing dir: %v", err)
	}
	src := filepath.Join(d, "file")
	if err := os.WriteFile(src, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(a.Workdir, "elsewhere/deeper/file2")
	e, err = c.Move(ctx, src, dst, "")
	if err != nil || e.Path != dst || e.Name != "file2" {
		t.Fatalf("move: %+v %v", e, err)
	}
	if _, err := os.Stat(dst); err != nil {
		t.Error(err)
	}
	if _, err := c.Move(ctx, src, dst, ""); sandbox.ClassOf(err) != sandbox.ClassNotFound {
		t.Errorf("move missing: %v", err)
	}
	if err := c.Remove(ctx, filepath.Join(a.Workdir, "a"), ""); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(a.Workdir, "a")); !os.IsNotExist(err) {
		t.Errorf("tree not removed: %v", err)
	}
	if err := c.Remove(ctx, filepath.Join(a.Workdir, "a"), ""); sandbox.ClassOf(err) != sandbox.ClassNotFound {
		t.Errorf("remove missing: %v", err)
	}
}

func TestListDirDepth(t *testing.T) {
	a, c := startAgent(t, agenttest.Options{})
	ctx := testCtx(t)
	root := filepath.Join(a.Workdir, "tree")
	for _, d := range []string{"x/y/z", "w"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	_ = os.WriteFile(filepath.Join(root, "x/file"), nil, 0o644)
	_ = os.Symlink(filepath.Join(root, "x"), filepath.Join(root, "lnk"))
	names := func(depth int) []string {
		es, err := c.ListDir(ctx, root, "", depth)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range es {
			rel, _ := filepath.Rel(root, e.Path)
			out = append(out, rel)
		}
		sort.Strings(out)
		return out
	}
	if got, want := names(1), []string{"lnk", "w", "x"}; !slices.Equal(got, want) {
		t.Errorf("depth 1: %v, want %v", got, want)
	}
	// The symlinked directory is listed but not descended into.
	if got, want := names(2), []string{"lnk", "w", "x", "x/file", "x/y"}; !slices.Equal(got, want) {
		t.Errorf("depth 2: %v, want %v", got, want)
	}
	if got := names(10); len(got) != 6 {
		t.Errorf("depth 10: %v", got)
	}
	if _, err := c.ListDir(ctx, filepath.Join(root, "x/file"), "", 1); sandbox.ClassOf(err) != sandbox.ClassInvalid {
		t.Errorf("list a file: %v", err)
	}
	if _, err := c.ListDir(ctx, filepath.Join(root, "nope"), "", 1); sandbox.ClassOf(err) != sandbox.ClassNotFound {
		t.Errorf("list missing: %v", err)
	}
	if os.Geteuid() == 0 {
		private := filepath.Join(a.Dir, "private")
		_ = os.Mkdir(private, 0o700)
		if _, err := c.ListDir(ctx, private, "nobody", 1); sandbox.ClassOf(err) != sandbox.ClassForbidden {
			t.Errorf("list a 0700 root dir as nobody: %v", err)
		}
	}
}

// nextEvent reads watch events until one matches, bounded in time by the
// test context.
func nextEvent(t *testing.T, w *agentclient.Watcher, name string, op agentclient.FSOp) agentclient.FSEvent {
	t.Helper()
	for range 100 {
		ev, err := w.Next()
		if err != nil {
			t.Fatalf("waiting for %s %s: %v", op, name, err)
		}
		if ev.Name == name && ev.Op == op {
			return ev
		}
	}
	t.Fatalf("no %s event for %s", op, name)
	return agentclient.FSEvent{}
}

func TestWatchDir(t *testing.T) {
	a, c := startAgent(t, agenttest.Options{})
	ctx := testCtx(t)
	dir := filepath.Join(a.Workdir, "watched")
	_ = os.Mkdir(dir, 0o755)
	w, err := c.WatchDir(ctx, dir, "", agentclient.WatchOptions{Recursive: true, IncludeEntry: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	f := filepath.Join(dir, "a.txt")
	_ = os.WriteFile(f, []byte("1"), 0o644)
	ev := nextEvent(t, w, "a.txt", agentclient.OpCreate)
	if ev.Entry == nil || ev.Entry.Path != f {
		t.Errorf("create event entry %+v", ev.Entry)
	}
	nextEvent(t, w, "a.txt", agentclient.OpWrite)
	_ = os.Chmod(f, 0o600)
	nextEvent(t, w, "a.txt", agentclient.OpChmod)
	_ = os.Rename(f, filepath.Join(dir, "b.txt"))
	nextEvent(t, w, "a.txt", agentclient.OpRename)
	nextEvent(t, w, "b.txt", agentclient.OpCreate)
	_ = os.Remove(filepath.Join(dir, "b.txt"))
	nextEvent(t, w, "b.txt", agentclient.OpRemove)
	// Recursive: directories created later are watched too.
	_ = os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	nextEvent(t, w, "sub", agentclient.OpCreate)
	_ = os.WriteFile(filepath.Join(dir, "sub/deep"), nil, 0o644)
	nextEvent(t, w, "sub/deep", agentclient.OpCreate)

	if _, err := c.WatchDir(ctx, f, "", agentclient.WatchOptions{}); sandbox.ClassOf(err) != sandbox.ClassNotFound {
		t.Errorf("watch missing: %v", err)
	}
}

func TestPollingWatcher(t *testing.T) {
	a, _ := startAgent(t, agenttest.Options{})
	ctx := testCtx(t)
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", a.Socket)
	}}}
	fc := filesystemconnect.NewFilesystemClient(hc, "http://agent", connect.WithProtoJSON())
	dir := filepath.Join(a.Workdir, "polled")
	_ = os.Mkdir(dir, 0o755)
	cw, err := fc.CreateWatcher(ctx, connect.NewRequest(&fspb.CreateWatcherRequest{Path: dir}))
	if err != nil {
		t.Fatal(err)
	}
	id := cw.Msg.GetWatcherId()
	_ = os.WriteFile(filepath.Join(dir, "x"), nil, 0o644)
	var got []*fspb.FilesystemEvent
	for i := 0; i < 200 && len(got) == 0; i++ {
		resp, err := fc.GetWatcherEvents(ctx, connect.NewRequest(&fspb.GetWatcherEventsRequest{WatcherId: id}))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, resp.Msg.GetEvents()...)
		time.Sleep(10 * time.Millisecond)
	}
	if len(got) == 0 || got[0].GetName() != "x" || got[0].GetType() != fspb.EventType_EVENT_TYPE_CREATE {
		t.Fatalf("events %v", got)
	}
	if _, err := fc.RemoveWatcher(ctx, connect.NewRequest(&fspb.RemoveWatcherRequest{WatcherId: id})); err != nil {
		t.Fatal(err)
	}
	_, err = fc.GetWatcherEvents(ctx, connect.NewRequest(&fspb.GetWatcherEventsRequest{WatcherId: id}))
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("removed watcher: %v", err)
	}
}
