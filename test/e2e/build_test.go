package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/template/bootstrap"
)

// debianTemplate imports debian:bookworm into d's store, bootstrapped
// once per test cache (AGENTBOX_TEST_CACHE, outside the checkout) with
// the host's apt settings.
func debianTemplate(t *testing.T, ctx context.Context, c *client.Client) {
	t.Helper()
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		t.Skip("needs mmdebstrap (apt-get install mmdebstrap) to bootstrap debian:bookworm")
	}
	cache := testCache(t)
	var log bytes.Buffer
	start := time.Now()
	tarball, err := bootstrap.Bootstrap(ctx, bootstrap.Options{Image: "debian:bookworm", CacheDir: filepath.Join(cache, "bootstrap")}, &log)
	if err != nil {
		t.Skipf("cannot bootstrap debian:bookworm on this host (no Debian mirror reachable through its apt settings?): %v\n%s", err, lastLines(log.String(), 20))
	}
	t.Logf("bootstrap debian:bookworm: %s", time.Since(start).Round(time.Millisecond))
	f, err := os.Open(tarball)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := c.ImportTemplate(ctx, "debian:bookworm", f, -1, nil, nil); err != nil {
		t.Fatal(err)
	}
}

// tarDir tars a build context.
func tarDir(t *testing.T, files map[string]string) io.Reader {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, body := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(body))
	}
	tw.Close()
	return &buf
}

const buildDockerfile = `FROM debian:bookworm AS tools
RUN echo from-the-tools-stage > /stage.txt

FROM debian:bookworm
ENV GREETING=hello
RUN echo 'builder:x:1000:1000::/home/builder:/bin/sh' >> /etc/passwd && echo 'builder:x:1000:' >> /etc/group
WORKDIR /app
COPY --chown=1000:1000 app/ /app/
COPY --from=tools /stage.txt /from-stage.txt
RUN --mount=type=secret,id=token sha256sum < /run/secrets/token > /token.sha
RUN --mount=type=secret,id=token,target=/etc/apt/auth.conf.d/test.conf --mount=type=secret,id=token,env=TOKEN \
    test -s /etc/apt/auth.conf.d/test.conf && test -n "$TOKEN" && echo ok > /secret-ok
RUN --mount=type=cache,target=/var/cache/thing sh -c 'echo x >> /var/cache/thing/count; wc -l < /var/cache/thing/count > /cache-count'
SHELL ["/bin/bash", "-c"]
RUN exec 3<>/dev/tcp/198.18.77.1/80 && printf 'GET / HTTP/1.0\r\nHost: t\r\n\r\n' >&3 && cat <&3 > /fetched.txt
USER 1000
RUN echo "$GREETING from $(pwd) as $(id -u)" > /app/whoami
CMD ["sleep", "infinity"]
`

// TestTemplateBuild builds a multi-stage Dockerfile through a real daemon
// and checks the result in a sandbox made from it: RUN steps (one
// fetching from a test host), ENV/WORKDIR/USER, COPY with .dockerignore
// and --chown, COPY --from a stage, secret and cache mounts that reach no
// layer, a rebuild entirely from cache, and an unsupported instruction.
func TestTemplateBuild(t *testing.T) {
	inet := newTestInternet(t, nil)
	d := networkDaemon(t, inet)
	c := d.sdk(t, "net-key")
	ctx := waitCtx(t, 10*time.Minute)
	debianTemplate(t, ctx, c)

	secret := "s3cr3t-" + string(sandbox.NewID())
	files := map[string]string{
		"Dockerfile":      buildDockerfile,
		".dockerignore":   "app/*.log\n",
		"app/hello.txt":   "hello file\n",
		"app/ignored.log": "must not be copied\n",
	}
	req := client.BuildRequest{Tags: []string{"buildtest:1"}, Secrets: map[string][]byte{"token": []byte(secret)}}
	var out strings.Builder
	build := func() (map[string]int, time.Duration) {
		counts := map[string]int{}
		out.Reset()
		start := time.Now()
		_, err := c.BuildTemplate(ctx, req, tarDir(t, files), func(ev client.BuildEvent) {
			counts[ev.Type]++
			out.WriteString(ev.Type + " " + ev.Instruction + ev.Output + ev.Message + "\n")
		})
		if err != nil {
			t.Fatalf("build: %v\n%s", err, out.String())
		}
		return counts, time.Since(start)
	}
	first, took := build()
	t.Logf("first build: %s, %v", took.Round(time.Millisecond), first)
	if strings.Contains(out.String(), secret) {
		t.Errorf("the secret appeared in the build output")
	}

	id := createRaw(t, d, "net-key", map[string]any{"template": "buildtest:1"})
	sh := func(script string) string {
		t.Helper()
		status, data := d.call(t, "POST", "/v1/sandboxes/"+id+"/exec", "net-key",
			map[string]any{"cmd": []string{"/bin/sh", "-c", script}, "timeout": 20})
		if status != 200 {
			t.Fatalf("exec %q: %d %s", script, status, data)
		}
		m := mustJSON(t, data)
		return strings.TrimSpace(m["stdout"].(string) + m["stderr"].(string))
	}
	sum := sha256.Sum256([]byte(secret))
	checks := []struct{ script, want string }{
		{"cat /app/whoami", "hello from /app as 1000"},
		{"cat /app/hello.txt; stat -c %u:%g /app/hello.txt", "hello file\n1000:1000"},
		{"test -e /app/ignored.log && echo present || echo absent", "absent"},
		{"cat /from-stage.txt", "from-the-tools-stage"},
		{"cut -d' ' -f1 /token.sha", hex.EncodeToString(sum[:])},
		{"cat /secret-ok", "ok"},
		{"test -e /etc/apt/auth.conf.d/test.conf && echo present || echo absent", "absent"},
		{"ls -A /var/cache/thing 2>/dev/null | wc -l", "0"},
		{"cat /cache-count", "1"},
		{"tail -n1 /fetched.txt", "hello from the test internet (t)"},
		{"echo $GREETING; pwd; id -u", "hello\n/app\n1000"},
	}
	for _, ch := range checks {
		if got := sh(ch.script); got != ch.want {
			t.Errorf("%s: got %q, want %q", ch.script, got, ch.want)
		}
	}

	// No stored layer holds the secret: grep every file of the store.
	filepath.WalkDir(filepath.Join(d.dataDir, "templates"), func(p string, e fs.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(p)
		if err == nil && bytes.Contains(data, []byte(secret)) {
			t.Errorf("the secret is in %s", p)
		}
		return nil
	})

	second, took := build()
	t.Logf("rebuild of the unchanged Dockerfile: %s, %v", took.Round(time.Millisecond), second)
	if second["running"] != 0 || second["cached"] == 0 {
		t.Errorf("the rebuild ran steps: %v\n%s", second, out.String())
	}

	bad := map[string]string{"Dockerfile": "FROM debian:bookworm\nRUN true\nFROBNICATE now\n"}
	var line int
	_, err := c.BuildTemplate(ctx, client.BuildRequest{Tags: []string{"bad:1"}}, tarDir(t, bad), func(ev client.BuildEvent) {
		if ev.Type == "error" {
			line = ev.Line
		}
	})
	if err == nil || line != 3 || !strings.Contains(strings.ToLower(err.Error()), "frobnicate") {
		t.Errorf("unsupported instruction: err %v, line %d (want line 3)", err, line)
	}
}

// cacheAtRestDockerfile leaves set-uid and set-gid programs and a
// world-writable directory in a cache mount, then uses them from the next
// steps: as root, running the set-uid copy, and as an ordinary user
// writing into the directory root made.
const cacheAtRestDockerfile = `FROM debian:bookworm
RUN --mount=type=cache,target=/c sh -c 'cp /bin/true /c/suidbb && chmod 4755 /c/suidbb && cp /bin/true /c/sgid && chmod 2755 /c/sgid && mkdir -p /c/ww && chmod 777 /c/ww && echo root-wrote > /c/ww/root'
RUN --mount=type=cache,target=/c sh -c '/c/suidbb && stat -c "%a %u:%g" /c/ww /c/ww/root > /root-saw'
RUN echo 'builder:x:1000:1000::/out:/bin/sh' >> /etc/passwd && echo 'builder:x:1000:' >> /etc/group && mkdir /out && chown 1000:1000 /out
USER 1000
RUN --mount=type=cache,target=/c sh -c 'cat /c/ww/root > /out/user-saw && echo user-wrote > /c/ww/user && stat -c "%u" /c/ww/user >> /out/user-saw'
`

// TestSecurityBuildCacheAtRest: whatever a build step leaves in a cache
// mount (set-uid root programs, world-writable directories of its root),
// the cache's files on the host between steps belong to no host account
// (not root, not uid 1000: one range of ids that no sandbox is given
// either) and none is set-uid or set-gid; the next steps still use the
// cache as root and as an ordinary user, with the owners it had.
func TestSecurityBuildCacheAtRest(t *testing.T) {
	d := startDaemon(t)
	c := d.sdk(t, "")
	ctx := waitCtx(t, 10*time.Minute)
	debianTemplate(t, ctx, c)

	var out strings.Builder
	_, err := c.BuildTemplate(ctx, client.BuildRequest{Tags: []string{"cacherest:1"}}, tarDir(t, map[string]string{"Dockerfile": cacheAtRestDockerfile}), func(ev client.BuildEvent) {
		out.WriteString(ev.Type + " " + ev.Instruction + ev.Output + ev.Message + "\n")
	})
	if err != nil {
		t.Fatalf("build: %v\n%s", err, out.String())
	}

	// On the host: the cache mounts' directory.
	cacheDir := filepath.Join(d.dataDir, "build", "run", "cache")
	var owners []uint32
	entries := 0
	err = filepath.WalkDir(cacheDir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || p == cacheDir {
			return err
		}
		entries++
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		rel, _ := filepath.Rel(cacheDir, p)
		if fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0 && !fi.IsDir() {
			t.Errorf("%s on the host is set-id: %v %d:%d", rel, fi.Mode(), st.Uid, st.Gid)
		}
		// Below the sandboxes' id ranges lie the host's accounts.
		if st.Uid < 1<<30 || st.Gid < 1<<30 {
			t.Errorf("%s on the host belongs to a host account: %v %d:%d", rel, fi.Mode(), st.Uid, st.Gid)
		}
		owners = append(owners, st.Uid/65536, st.Gid/65536)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if entries < 6 {
		t.Fatalf("the cache holds %d entries", entries)
	}
	for _, o := range owners {
		if o != owners[0] {
			t.Errorf("the cache's owners are in several id ranges: %v", owners)
			break
		}
	}

	// The steps saw the cache as they left it.
	id := createRaw(t, d, "", map[string]any{"template": "cacherest:1"})
	status, data := d.call(t, "POST", "/v1/sandboxes/"+id+"/exec", "",
		map[string]any{"cmd": []string{"/bin/sh", "-c", "cat /root-saw /out/user-saw"}, "timeout": 20})
	if status != 200 {
		t.Fatalf("exec: %d %s", status, data)
	}
	m := mustJSON(t, data)
	if got, want := strings.TrimSpace(m["stdout"].(string)+m["stderr"].(string)), "777 0:0\n644 0:0\nroot-wrote\n1000"; got != want {
		t.Errorf("the steps saw %q, want %q", got, want)
	}
}
