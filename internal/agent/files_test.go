package agent_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"mime/multipart"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/agent/agenttest"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// rawHTTP returns a plain HTTP client for the agent's socket, for requests
// the typed client does not make (multipart, gzip, E2B JSON).
func rawHTTP(t *testing.T, a *agenttest.Agent) *http.Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", a.Socket)
		},
		DisableCompression: true,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func filesURL(path, user string) string {
	q := url.Values{"path": {path}}
	if user != "" {
		q.Set("username", user)
	}
	return "http://agent/files?" + q.Encode()
}

func TestUploadDownloadRoundTrip(t *testing.T) {
	a, c := startAgent(t, agenttest.Options{})
	ctx := testCtx(t)
	p := filepath.Join(a.Workdir, "new/dir/hello.txt")
	e, err := c.Upload(ctx, p, "", strings.NewReader("hello"))
	if err != nil {
		t.Fatal(err)
	}
	if e.Path != p || e.Name != "hello.txt" || e.Type != agentclient.FileTypeFile || e.Size != 5 {
		t.Errorf("upload entry %+v", e)
	}
	rc, size, err := c.Download(ctx, p, "")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "hello" || size != 5 {
		t.Errorf("download %q size %d", b, size)
	}
	// Overwriting keeps the existing mode.
	if err := os.Chmod(p, 0o750); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Upload(ctx, p, "", strings.NewReader("again")); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o750 {
		t.Errorf("mode after overwrite %v", fi.Mode())
	}
	if leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(p), ".agentbox-upload-*")); len(leftovers) > 0 {
		t.Errorf("temporary files left: %v", leftovers)
	}

	if _, _, err := c.Download(ctx, a.Workdir, ""); sandbox.ClassOf(err) != sandbox.ClassInvalid {
		t.Errorf("download a directory: %v", err)
	}
	if _, _, err := c.Download(ctx, filepath.Join(a.Workdir, "missing"), ""); sandbox.ClassOf(err) != sandbox.ClassNotFound {
		t.Errorf("download a missing file: %v", err)
	}
	if _, err := c.Upload(ctx, a.Workdir, "", strings.NewReader("x")); sandbox.ClassOf(err) != sandbox.ClassInvalid {
		t.Errorf("upload onto a directory: %v", err)
	}

	// The REST error body has E2B's shape.
	resp, err := rawHTTP(t, a).Get(filesURL(a.Workdir, ""))
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if resp.StatusCode != 400 || body.Code != 400 || !strings.Contains(body.Message, "directory") {
		t.Errorf("directory download: %d %+v", resp.StatusCode, body)
	}
}

// TestDownloadPseudoFile: files of /proc cannot seek to their end and
// report size 0; they download with what reading them gives (the console
// reads /proc/net/tcp for a sandbox's listening ports).
func TestDownloadPseudoFile(t *testing.T) {
	_, c := startAgent(t, agenttest.Options{})
	rc, _, err := c.Download(testCtx(t), "/proc/self/status", "")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if !strings.HasPrefix(string(b), "Name:") {
		t.Errorf("download of /proc/self/status: %q", b)
	}
}

func TestUploadMultipartAndGzip(t *testing.T) {
	a, _ := startAgent(t, agenttest.Options{})
	hc := rawHTTP(t, a)
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	p1, p2 := filepath.Join(a.Workdir, "m/one.txt"), filepath.Join(a.Workdir, "m/two.txt")
	for _, f := range []struct{ path, body string }{{p1, "first"}, {p2, "second"}} {
		w, err := mw.CreateFormFile("file", f.path)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, f.body)
	}
	mw.Close()
	resp, err := hc.Post("http://agent/files", mw.FormDataContentType(), &buf)
	if err != nil {
		t.Fatal(err)
	}
	var got []map[string]string
	_ = json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	if resp.StatusCode != 200 || len(got) != 2 || got[0]["path"] != p1 || got[1]["name"] != "two.txt" || got[1]["type"] != "file" {
		t.Fatalf("multipart upload: %d %v", resp.StatusCode, got)
	}
	for p, want := range map[string]string{p1: "first", p2: "second"} {
		if b, _ := os.ReadFile(p); string(b) != want {
			t.Errorf("%s = %q", p, b)
		}
	}

	// Octet-stream with Content-Encoding: gzip.
	var gzBody bytes.Buffer
	gw := gzip.NewWriter(&gzBody)
	io.WriteString(gw, strings.Repeat("zipped ", 1000))
	gw.Close()
	p3 := filepath.Join(a.Workdir, "gz.txt")
	req, _ := http.NewRequest(http.MethodPost, filesURL(p3, ""), &gzBody)
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("Content-Encoding", "gzip")
	resp, err = hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if b, _ := os.ReadFile(p3); resp.StatusCode != 200 || string(b) != strings.Repeat("zipped ", 1000) {
		t.Fatalf("gzip upload: %d, %d bytes", resp.StatusCode, len(b))
	}

	// Download with Accept-Encoding: gzip.
	req, _ = http.NewRequest(http.MethodGet, filesURL(p3, ""), nil)
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err = hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("Content-Encoding") != "gzip" || resp.Header.Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("headers %v", resp.Header)
	}
	zr, err := gzip.NewReader(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(zr); string(b) != strings.Repeat("zipped ", 1000) {
		t.Errorf("gzip download: %d bytes", len(b))
	}
}

// patternReader yields n deterministic pseudo-random bytes.
type patternReader struct {
	rng *rand.ChaCha8
	n   int64
}

func newPattern(n int64) *patternReader {
	return &patternReader{rng: rand.NewChaCha8([32]byte{7}), n: n}
}

func (p *patternReader) Read(b []byte) (int, error) {
	if p.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(b)) > p.n {
		b = b[:p.n]
	}
	n, _ := p.rng.Read(b)
	p.n -= int64(n)
	return n, nil
}

// peakRSS returns VmHWM of pid in KiB.
func peakRSS(t *testing.T, pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

func TestLargeFileIsStreamed(t *testing.T) {
	if testing.Short() {
		t.Skip("64 MiB transfer")
	}
	a, c := startAgent(t, agenttest.Options{})
	ctx := testCtx(t)
	const size = 64 << 20
	p := filepath.Join(a.Workdir, "big.bin")
	want := sha256.New()
	if _, err := io.Copy(want, newPattern(size)); err != nil {
		t.Fatal(err)
	}
	e, err := c.Upload(ctx, p, "", newPattern(size))
	if err != nil {
		t.Fatal(err)
	}
	if e.Size != size {
		t.Errorf("uploaded %d bytes", e.Size)
	}
	rc, n, err := c.Download(ctx, p, "")
	if err != nil {
		t.Fatal(err)
	}
	got := sha256.New()
	copied, err := io.Copy(got, rc)
	rc.Close()
	if err != nil || copied != size || n != size {
		t.Fatalf("download: %d bytes (Content-Length %d): %v", copied, n, err)
	}
	if !bytes.Equal(got.Sum(nil), want.Sum(nil)) {
		t.Error("downloaded content differs")
	}
	// Neither direction may hold the file in memory: the agent's peak RSS
	// stays far below the file size.
	if rss := peakRSS(t, a.Pid()); rss > 48<<10 {
		t.Errorf("agent peak RSS %d KiB for a %d MiB transfer", rss, size>>20)
	}
}

func TestUploadAsOtherUser(t *testing.T) {
	requireRoot(t)
	a, c := startAgent(t, agenttest.Options{})
	ctx := testCtx(t)
	// The workdir is world-writable: nobody may create files there, and
	// they belong to nobody.
	p := filepath.Join(a.Workdir, "nobody-dir/file.txt")
	if _, err := c.Upload(ctx, p, "nobody", strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{p, filepath.Dir(p)} {
		fi, err := os.Stat(q)
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 65534 || st.Gid != 65534 {
			t.Errorf("%s owned by %d:%d, want nobody", q, st.Uid, st.Gid)
		}
	}
	// nobody cannot write into a directory only root may write.
	locked := filepath.Join(a.Dir, "root-only")
	if err := os.Mkdir(locked, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Upload(ctx, filepath.Join(locked, "f"), "nobody", strings.NewReader("x")); sandbox.ClassOf(err) != sandbox.ClassForbidden {
		t.Errorf("upload into root-only dir as nobody: %v", err)
	}
	secret := filepath.Join(locked, "secret")
	if err := os.WriteFile(secret, []byte("s"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Download(ctx, secret, "nobody"); sandbox.ClassOf(err) != sandbox.ClassForbidden {
		t.Errorf("download a 0600 root file as nobody: %v", err)
	}
	// Root (the agent's own user) can.
	if rc, _, err := c.Download(ctx, secret, ""); err != nil {
		t.Errorf("download as root: %v", err)
	} else {
		rc.Close()
	}
}

func TestUploadDiskFull(t *testing.T) {
	requireRoot(t)
	a, c := startAgent(t, agenttest.Options{})
	mnt := filepath.Join(a.Dir, "small")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount a small tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(mnt, syscall.MNT_DETACH) })
	_, err := c.Upload(testCtx(t), filepath.Join(mnt, "big"), "", newPattern(4<<20))
	if sandbox.ClassOf(err) != sandbox.ClassNoSpace {
		t.Fatalf("upload to a full disk: %v", err)
	}
	if ents, _ := os.ReadDir(mnt); len(ents) != 0 {
		t.Errorf("partial files left on the full disk: %v", ents)
	}
}

// TestAccessTokenRotation: POST /init's accessToken, sent with the current
// token, replaces it (a pooled sandbox handed out gets its own); the old
// one is refused from then on, a short one and a caller without the
// current token are refused.
func TestAccessTokenRotation(t *testing.T) {
	a, pool := startAgent(t, agenttest.Options{Token: "pool-token-0123456789"})
	ctx := testCtx(t)
	if err := a.Client(t, "wrong").SetAccessToken(ctx, "attacker-token-0123456789"); sandbox.ClassOf(err) != sandbox.ClassUnauth {
		t.Fatalf("rotation without the current token: %v", err)
	}
	if err := pool.SetAccessToken(ctx, "short"); sandbox.ClassOf(err) != sandbox.ClassInvalid {
		t.Fatalf("a short token: %v", err)
	}
	if err := pool.SetAccessToken(ctx, "own-token-0123456789abcdef"); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Run(ctx, agentclient.StartOptions{Cmd: "true"}, nil, nil, nil); sandbox.ClassOf(err) != sandbox.ClassUnauth {
		t.Fatalf("the old token after rotation: %v", err)
	}
	if _, err := a.Client(t, "attacker-token-0123456789").Envs(ctx); sandbox.ClassOf(err) != sandbox.ClassUnauth {
		t.Fatalf("the refused rotation's token: %v", err)
	}
	if res, err := a.Client(t, "own-token-0123456789abcdef").Run(ctx, agentclient.StartOptions{Cmd: "true"}, nil, nil, nil); err != nil || res.ExitCode != 0 {
		t.Fatalf("the new token: %+v, %v", res, err)
	}
}

// TestAccessTokenRotationHostListener: an agent that also serves a
// reachable listener (--listen-also: an agentbox node's pod IP) keeps its
// start token valid on the host socket after a rotation on the reachable
// one, so the node's own exec keeps working; the reachable listener
// refuses the old token.
func TestAccessTokenRotationHostListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	const start, own = "pool-token-0123456789", "own-token-0123456789abcdef"
	a, host := startAgent(t, agenttest.Options{Token: start, ListenAlso: "tcp://" + addr})
	ctx := testCtx(t)
	pod := func(token string) *agentclient.Client {
		c := agentclient.New(agentclient.Endpoint{Network: "tcp", Address: addr}, token)
		t.Cleanup(func() { c.Close() })
		return c
	}
	if err := pod(start).SetAccessToken(ctx, own); err != nil {
		t.Fatal(err)
	}
	if _, err := pod(start).Envs(ctx); sandbox.ClassOf(err) != sandbox.ClassUnauth {
		t.Fatalf("the start token on the reachable listener after rotation: %v", err)
	}
	if _, err := pod(own).Envs(ctx); err != nil {
		t.Fatalf("the new token on the reachable listener: %v", err)
	}
	for name, c := range map[string]*agentclient.Client{"start": host, "new": a.Client(t, own)} {
		if res, err := c.Run(ctx, agentclient.StartOptions{Cmd: "true"}, nil, nil, nil); err != nil || res.ExitCode != 0 {
			t.Fatalf("the %s token on the host socket: %+v, %v", name, res, err)
		}
	}
	if _, err := a.Client(t, "another-token-0123456789").Envs(ctx); sandbox.ClassOf(err) != sandbox.ClassUnauth {
		t.Fatalf("another token on the host socket: %v", err)
	}
}

func TestAccessToken(t *testing.T) {
	a, good := startAgent(t, agenttest.Options{Token: "s3cret"})
	ctx := testCtx(t)
	none := a.Client(t, "")
	wrong := a.Client(t, "s3cret-not")
	if err := none.Health(ctx); err != nil {
		t.Errorf("health without token: %v", err)
	}
	for name, c := range map[string]*agentclient.Client{"no token": none, "wrong token": wrong} {
		if _, err := c.Run(ctx, agentclient.StartOptions{Cmd: "true"}, nil, nil, nil); sandbox.ClassOf(err) != sandbox.ClassUnauth {
			t.Errorf("%s: start: %v", name, err)
		}
		if _, err := c.List(ctx); sandbox.ClassOf(err) != sandbox.ClassUnauth {
			t.Errorf("%s: list: %v", name, err)
		}
		if _, _, err := c.Download(ctx, "/etc/hostname", ""); sandbox.ClassOf(err) != sandbox.ClassUnauth {
			t.Errorf("%s: download: %v", name, err)
		}
		if _, err := c.Envs(ctx); sandbox.ClassOf(err) != sandbox.ClassUnauth {
			t.Errorf("%s: envs: %v", name, err)
		}
	}
	if res, err := good.Run(ctx, agentclient.StartOptions{Cmd: "true"}, nil, nil, nil); err != nil || res.ExitCode != 0 {
		t.Errorf("with token: %+v %v", res, err)
	}
	resp, err := rawHTTP(t, a).Get("http://agent/envs")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 401 || !strings.Contains(string(b), `"code":401`) {
		t.Errorf("envs without token: %d %s", resp.StatusCode, b)
	}
}
