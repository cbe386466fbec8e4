package agent

import (
	"encoding/base64"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	pb "github.com/agentbox/agentbox/api/proto/process"
)

// Unit tests for pure helpers. They never call NewServer: that starts the
// process-wide reaper, which would steal child statuses from the
// integration tests' exec.Cmd.Wait in the same test binary.

func TestLsMode(t *testing.T) {
	for mode, want := range map[fs.FileMode]string{
		0o644:                              "-rw-r--r--",
		fs.ModeDir | 0o755:                 "drwxr-xr-x",
		fs.ModeSymlink | 0o777:             "lrwxrwxrwx",
		fs.ModeDir | fs.ModeSticky | 0o777: "drwxrwxrwt",
		fs.ModeSetuid | 0o755:              "-rwsr-xr-x",
		fs.ModeSetgid | 0o640:              "-rw-r-S---",
		fs.ModeNamedPipe | 0o600:           "prw-------",
		fs.ModeSocket | 0o755:              "srwxr-xr-x",
		fs.ModeDevice | fs.ModeCharDevice:  "c---------",
		fs.ModeDevice | 0o660:              "brw-rw----",
	} {
		if got := lsMode(mode); got != want {
			t.Errorf("lsMode(%v) = %q, want %q", mode, got, want)
		}
	}
}

func TestAccountsParsing(t *testing.T) {
	dir := t.TempDir()
	passwd := filepath.Join(dir, "passwd")
	group := filepath.Join(dir, "group")
	os.WriteFile(passwd, []byte("# comment\nroot:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000::/home/user:\nbad:line\n"), 0o644)
	os.WriteFile(group, []byte("root:x:0:\nuser:x:1000:\ndocker:x:999:user,other\nwheel:x:10: other , user \n"), 0o644)
	a := newAccounts(passwd, group)
	u, ok := a.lookupName("user")
	if !ok || u.uid != 1000 || u.home != "/home/user" || u.shell != "" {
		t.Fatalf("user: %+v %v", u, ok)
	}
	if _, ok := a.lookupName("bad"); ok {
		t.Error("malformed line parsed")
	}
	if got := a.supplementaryGroups("user", 1000); !slices.Equal(got, []uint32{1000, 999, 10}) {
		t.Errorf("groups %v", got)
	}
	if a.userName(0) != "root" || a.userName(4242) != "4242" || a.groupName(999) != "docker" || a.groupName(7) != "7" {
		t.Error("name rendering")
	}
	// Changes to the files are picked up.
	time.Sleep(10 * time.Millisecond)
	os.WriteFile(passwd, []byte("root:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000::/home/user:\nnew:x:1001:1001::/home/new:/bin/sh\n"), 0o644)
	if _, ok := a.lookupName("new"); !ok {
		t.Error("new user not seen after the file changed")
	}
}

func TestResolvePath(t *testing.T) {
	u := &User{Home: "/home/user"}
	for in, want := range map[string]string{
		"~":            "/home/user",
		"~/a/b":        "/home/user/a/b",
		"rel/x":        "/home/user/rel/x",
		"/abs/../y":    "/y",
		"./.":          "/home/user",
		"~other/thing": "/home/user/~other/thing",
	} {
		if got, err := u.resolvePath(in); err != nil || got != want {
			t.Errorf("resolvePath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := u.resolvePath(""); err == nil {
		t.Error("empty path accepted")
	}
}

func TestBasicAuthUser(t *testing.T) {
	h := http.Header{}
	if basicAuthUser(h) != "" {
		t.Error("no header")
	}
	h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("user:")))
	if got := basicAuthUser(h); got != "user" {
		t.Errorf("got %q", got)
	}
	h.Set("Authorization", "Bearer xyz")
	if basicAuthUser(h) != "" {
		t.Error("bearer parsed as basic")
	}
}

func TestEndEvent(t *testing.T) {
	exited := unix.WaitStatus(3 << 8)
	ev := endEvent(exited, false, 0)
	if !ev.GetExited() || ev.GetExitCode() != 3 || ev.GetStatus() != "exit status 3" || ev.GetError() != "exit status 3" {
		t.Errorf("exit 3: %v", ev)
	}
	ok := endEvent(unix.WaitStatus(0), false, 0)
	if !ok.GetExited() || ok.GetExitCode() != 0 || ok.Error != nil {
		t.Errorf("exit 0: %v", ok)
	}
	killed := unix.WaitStatus(unix.SIGKILL)
	ev = endEvent(killed, false, 0)
	if ev.GetExited() || ev.GetExitCode() != -1 || ev.GetStatus() != "signal: killed" {
		t.Errorf("killed: %v", ev)
	}
	ev = endEvent(killed, true, 1500*time.Millisecond)
	if ev.GetExited() || ev.GetStatus() != "killed" || ev.GetError() != "timeout after 1.5s" {
		t.Errorf("timeout: %v", ev)
	}
}

func TestAcceptsGzip(t *testing.T) {
	for v, want := range map[string]bool{
		"":                     false,
		"gzip":                 true,
		"deflate, gzip;q=0.8":  true,
		"gzip;q=0":             false,
		"br, identity":         false,
		"GZIP":                 true,
		"gzip ; q=0.5, br":     true,
		"identity;q=1, gzip;q": true,
	} {
		h := http.Header{}
		if v != "" {
			h.Set("Accept-Encoding", v)
		}
		if got := acceptsGzip(h); got != want {
			t.Errorf("acceptsGzip(%q) = %v", v, got)
		}
	}
}

func TestIsRPCPath(t *testing.T) {
	for p, want := range map[string]bool{
		"/process.Process/Start": true, "/files": false, "/health": false,
		"/execute": false, "/contexts/abc/restart": false,
	} {
		if isRPCPath(p) != want {
			t.Errorf("isRPCPath(%q) != %v", p, want)
		}
	}
}

func TestProcessEnv(t *testing.T) {
	s := &Server{defaultEnv: envMap([]string{"A=1", "AGENTBOX_ACCESS_TOKEN=x", "HOME=/wrong", "B=2", "A=3"})}
	u := &User{Name: "user", Home: "/home/user", Shell: "/bin/bash"}
	env := s.processEnv(u, map[string]string{"B": "override", "bad=key": "x"}, true)
	want := []string{"A=3", "B=override", "HOME=/home/user", "LOGNAME=user", "PATH=" + defaultPath, "SHELL=/bin/bash", "TERM=xterm-256color", "USER=user"}
	if !slices.Equal(env, want) {
		t.Errorf("env\n got %v\nwant %v", env, want)
	}
}

func TestHubEvictsSlowSubscriber(t *testing.T) {
	h := newHub()
	h.slow = 20 * time.Millisecond
	slow, _ := h.subscribe()
	fast, _ := h.subscribe()
	done := make(chan int)
	go func() { // fast drains everything until the end event
		n := 0
		for ev := range fast.ch {
			n++
			if ev.GetEnd() != nil {
				break
			}
		}
		done <- n
	}()
	data := &pb.ProcessEvent{Event: &pb.ProcessEvent_Data{Data: stdoutEvent([]byte("x"))}}
	for range subscriberBuffer + 5 {
		h.publish(data)
	}
	select {
	case <-slow.evicted:
	default:
		t.Fatal("slow subscriber not evicted")
	}
	h.finish(&pb.ProcessEvent{Event: &pb.ProcessEvent_End{End: &pb.ProcessEvent_EndEvent{}}})
	if n := <-done; n != subscriberBuffer+6 {
		t.Errorf("fast subscriber got %d events", n)
	}
	if _, ok := h.subscribe(); ok {
		t.Error("subscribe after finish succeeded")
	}
	slow.release()
	fast.release()
}

// TestShimRequestRoundTrip: what the agent encodes the Go shim decodes,
// every field kept; a NUL inside a string, an empty argv and an
// oversized request are refused before anything is sent.
func TestShimRequestRoundTrip(t *testing.T) {
	req := shimRequest{Path: "/usr/bin/env", Dir: "/workspace", Argv: []string{"env", "", "ü"}, Env: []string{"A=1", "B="},
		PTY: true, Cred: true, UID: 1000, GID: 1001, Groups: []uint32{1000, 27}, NoSetg: true}
	b, err := req.encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeShimRequest(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, req) {
		t.Fatalf("decoded %+v, want %+v", got, req)
	}
	for name, bad := range map[string]shimRequest{
		"NUL in argv": {Path: "/bin/x", Dir: "/", Argv: []string{"a\x00b"}},
		"NUL in env":  {Path: "/bin/x", Dir: "/", Argv: []string{"x"}, Env: []string{"A=\x00"}},
		"NUL in path": {Path: "/bin/\x00", Dir: "/", Argv: []string{"x"}},
		"empty argv":  {Path: "/bin/x", Dir: "/"},
		"too large":   {Path: "/bin/x", Dir: "/", Argv: []string{"x"}, Env: []string{strings.Repeat("x", shimMaxRequest)}},
	} {
		if _, err := bad.encode(); err == nil {
			t.Errorf("%s: encoded", name)
		}
	}
}

func TestConfinementOf(t *testing.T) {
	if c, err := confinementOf(http.Header{}); c != nil || err != nil {
		t.Errorf("no header: %v %v", c, err)
	}
	h := http.Header{}
	for _, r := range []string{"/workspace", "/tmp", "/workspace"} {
		h.Add(RootHeader, r)
	}
	c, err := confinementOf(h)
	if err != nil || !slices.Equal(c.roots, []string{"/workspace", "/tmp"}) {
		t.Fatalf("roots: %v %v", c, err)
	}
	for p, want := range map[string]string{"a/../b": "/workspace/b", "~": "/workspace/~", "/tmp/x/": "/tmp/x", "..": "/"} {
		if got, err := c.abs(p); err != nil || got != want {
			t.Errorf("abs(%q) = %q, %v; want %q", p, got, err, want)
		}
	}
	for _, p := range []string{"", "a\x00b"} {
		if _, err := c.abs(p); connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("abs(%q): %v", p, err)
		}
	}
	for _, bad := range []string{"", "rel", "/a/", "/a/../b", "/a//b", "/a/./b", "/a\x00"} {
		h := http.Header{RootHeader: {bad}}
		if _, err := confinementOf(h); connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("root %q: %v", bad, err)
		}
	}
	many := http.Header{}
	for i := range maxRoots + 1 {
		many.Add(RootHeader, "/r"+strconv.Itoa(i))
	}
	if _, err := confinementOf(many); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("%d roots: %v", maxRoots+1, err)
	}
	rs := &rootSet{paths: []string{"/workspace", "/workspace/sub", "/tmp"}}
	for p, want := range map[string]int{"/workspace": 0, "/workspace/a": 0, "/workspace/sub/x": 1, "/workspacex": -1, "/tmp": 2, "/": -1} {
		if got := rs.rootOf(p); got != want {
			t.Errorf("rootOf(%q) = %d, want %d", p, got, want)
		}
	}
	if got := (&rootSet{paths: []string{"/"}}).rootOf("/etc"); got != 0 {
		t.Errorf("rootOf under / = %d", got)
	}
}

// BenchmarkConfinedResolve: what confinement costs in the agent itself,
// without the HTTP round trip: the roots opened, a path three directories
// deep resolved and stat'ed, against one lstat of the same path.
func BenchmarkConfinedResolve(b *testing.B) {
	dir := b.TempDir()
	ws, tmp := filepath.Join(dir, "ws"), filepath.Join(dir, "tmp")
	for _, d := range []string{ws + "/a/b/c", tmp} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	file := ws + "/a/b/c/file"
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		b.Fatal(err)
	}
	b.Run("lstat", func(b *testing.B) {
		for b.Loop() {
			if _, err := os.Lstat(file); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("confined", func(b *testing.B) {
		conf := &confinement{roots: []string{ws, tmp}}
		for b.Loop() {
			rs, err := conf.open()
			if err != nil {
				b.Fatal(err)
			}
			r, err := rs.resolve(file, 0)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := statAt(r.dir, r.name); err != nil {
				b.Fatal(err)
			}
			r.close()
			rs.close()
		}
	})
}

// TestResolveWithoutOpenat2: where openat2 is missing (old kernels, some
// gVisor versions) the walk opens every component itself, with the same
// results as with openat2's shortcut.
func TestResolveWithoutOpenat2(t *testing.T) {
	dir := t.TempDir()
	ws, tmp, out := filepath.Join(dir, "ws"), filepath.Join(dir, "tmp"), filepath.Join(dir, "out")
	for _, d := range []string{ws + "/a/b/c", tmp + "/x", out} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	_ = os.WriteFile(ws+"/a/b/c/file", nil, 0o644)
	for link, target := range map[string]string{"a/l": "b", "a/b/totmp": tmp + "/x", "a/out": "../../out", "loop": "loop"} {
		if err := os.Symlink(target, filepath.Join(ws, link)); err != nil {
			t.Fatal(err)
		}
	}
	type result struct {
		dirReal, name string
		code          connect.Code
	}
	resolveAll := func() map[string]result {
		conf := &confinement{roots: []string{ws, tmp}}
		rs, err := conf.open()
		if err != nil {
			t.Fatal(err)
		}
		defer rs.close()
		got := map[string]result{}
		for _, p := range []string{"a/b/c/file", "a/l/c/file", "a/b/totmp/new", "a/out/x", "loop/x", "a/b/missing/x", "a/b/c/file/x", "a/b/c", "."} {
			for _, flags := range []int{0, followFinal} {
				abs, _ := conf.abs(p)
				r, err := rs.resolve(abs, flags)
				key := fmt.Sprintf("%s %d", p, flags)
				if err != nil {
					got[key] = result{code: connect.CodeOf(err)}
					continue
				}
				got[key] = result{dirReal: r.dirReal, name: r.name}
				r.close()
			}
		}
		return got
	}
	fast := resolveAll()
	if noOpenat2.Load() {
		t.Log("openat2 is missing here: both runs walk every component")
	}
	noOpenat2.Store(true)
	defer noOpenat2.Store(false)
	slow := resolveAll()
	if !reflect.DeepEqual(fast, slow) {
		t.Errorf("with openat2:\n%v\nwithout:\n%v", fast, slow)
	}
	if r := slow["a/l/c/file 0"]; r.dirReal != ws+"/a/b/c" || r.name != "file" {
		t.Errorf("a/l/c/file: %+v", r)
	}
	if r := slow["a/b/totmp/new 0"]; r.dirReal != tmp+"/x" || r.name != "new" {
		t.Errorf("a/b/totmp/new: %+v", r)
	}
	if r := slow["a/out/x 0"]; r.code != connect.CodePermissionDenied {
		t.Errorf("a/out/x: %+v", r)
	}
}
