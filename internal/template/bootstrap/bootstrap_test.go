package bootstrap

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// secretMarker stands for credentials in the host's apt settings: apt gets
// them, the tarball must not contain them.
const secretMarker = "agentbox-test-secret-7f3a"

// TestBootstrapBookworm bootstraps debian:bookworm (minbase plus one small
// package) for real, from the host's apt sources, and checks the tarball
// and the cache. It needs root, mmdebstrap and the Debian mirror the
// host's apt reaches (this machine and CI do).
func TestBootstrapBookworm(t *testing.T) {
	requireBootstrap(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()

	// Host settings with credentials, added through APT_CONFIG (which apt
	// reads before its own files): a proxy for a host that is never asked
	// and an auth.conf entry.
	aux := t.TempDir()
	auth := filepath.Join(aux, "auth.conf")
	os.WriteFile(auth, []byte("machine nowhere.invalid login u password "+secretMarker+"\n"), 0o600)
	aptConf := filepath.Join(aux, "apt.conf")
	os.WriteFile(aptConf, []byte(`Dir::Etc::netrc "`+auth+`";
Acquire::http::Proxy::nowhere.invalid "http://u:`+secretMarker+`@127.0.0.1:9/";
`), 0o644)
	t.Setenv("APT_CONFIG", aptConf)
	host, err := readHostApt(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(host.Secret) != 1 || !bytes.Contains(host.Auth, []byte(secretMarker)) {
		t.Fatalf("test credentials not read: secret %q, auth %q", host.Secret, host.Auth)
	}

	cache := t.TempDir()
	var log bytes.Buffer
	start := time.Now()
	path, err := Bootstrap(ctx, Options{Image: "debian:bookworm", Include: []string{"hello"}, CacheDir: cache}, &log)
	if err != nil {
		t.Fatalf("bootstrap: %v\n%s", err, log.String())
	}
	t.Logf("bootstrap of debian:bookworm minbase+hello took %s", time.Since(start).Round(time.Millisecond))
	if filepath.Dir(path) != cache {
		t.Errorf("tarball %s is not in the cache %s", path, cache)
	}
	checkTarball(t, path, sourceLines(debianSourcesFor(host.Sources, "bookworm"), true))

	// The run directory is gone and nothing stayed mounted.
	if ents, _ := os.ReadDir(filepath.Join(cache, "tmp")); len(ents) != 0 {
		t.Errorf("work files left in the cache: %v", ents)
	}
	if m := mountsUnder(cache); len(m) != 0 {
		t.Errorf("mounts left: %v", m)
	}

	// A second call is served from the cache: the tool is never run.
	marker := filepath.Join(aux, "ran")
	tool := filepath.Join(aux, "fake-mmdebstrap")
	os.WriteFile(tool, []byte("#!/bin/sh\ntouch "+marker+"\nexit 1\n"), 0o755)
	log.Reset()
	again, err := Bootstrap(ctx, Options{Image: "debian:12", Include: []string{"hello", "hello"}, CacheDir: cache, Tool: tool}, &log)
	if err != nil || again != path {
		t.Fatalf("second call = %q, %v; want the cached %q", again, err, path)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the second call ran mmdebstrap")
	}
	if !strings.Contains(log.String(), "cached") {
		t.Errorf("second call's progress does not say cached: %q", log.String())
	}

	// Another package list is another image: the (failing) tool runs, its
	// failure is reported with its output, and nothing is cached or left.
	_, err = Bootstrap(ctx, Options{Image: "debian:bookworm", CacheDir: cache, Tool: tool}, io.Discard)
	if err == nil {
		t.Fatal("a failing mmdebstrap gave no error")
	}
	if _, serr := os.Stat(marker); serr != nil {
		t.Errorf("a different package list did not run the tool: %v", err)
	}
	if tars, _ := filepath.Glob(filepath.Join(cache, "*.tar")); len(tars) != 1 {
		t.Errorf("cache holds %v after a failed run", tars)
	}
	if ents, _ := os.ReadDir(filepath.Join(cache, "tmp")); len(ents) != 0 {
		t.Errorf("work files left after a failed run: %v", ents)
	}
}

// checkTarball reads the whole tarball: Debian 12's files, owned by the
// image's root, the host's sources (redacted), no host files and no
// credentials anywhere.
func checkTarball(t *testing.T, path string, wantSources []string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	files := map[string][]byte{}
	owners := map[string][2]int{}
	for n := 0; ; n++ {
		if n > 1_000_000 {
			t.Fatal("tarball has too many entries")
		}
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("read tarball: %v", err)
		}
		name := strings.TrimPrefix(h.Name, ".")
		owners[name] = [2]int{h.Uid, h.Gid}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(secretMarker)) {
			t.Errorf("%s holds the host's credentials", name)
		}
		files[name] = b
	}
	for _, p := range []string{"/usr/bin/bash", "/usr/bin/hello", "/usr/bin/apt-get", "/etc/debian_version", "/etc/passwd"} {
		if _, ok := files[p]; !ok {
			t.Errorf("tarball has no %s", p)
		}
		if owners[p] != [2]int{0, 0} {
			t.Errorf("%s is owned by %v, not the image's root", p, owners[p])
		}
	}
	if v := string(files["/etc/debian_version"]); !strings.HasPrefix(v, "12") {
		t.Errorf("/etc/debian_version = %q", v)
	}
	if got := strings.TrimSpace(string(files["/etc/apt/sources.list"])); got != strings.Join(wantSources, "\n") {
		t.Errorf("/etc/apt/sources.list =\n%s\nwant the host's Debian sources\n%s", got, strings.Join(wantSources, "\n"))
	}
	for _, p := range []string{"/etc/resolv.conf", "/etc/hostname", chrootAuth, chrootSecret} {
		if _, ok := owners[p]; ok {
			t.Errorf("tarball holds %s", p)
		}
	}
}

func requireBootstrap(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("bootstrap runs mmdebstrap as root")
	}
	for _, tool := range []string{"mmdebstrap", "unshare", "apt-config"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (scripts/install-deps.sh installs it)", tool)
		}
	}
}
