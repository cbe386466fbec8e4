package builder

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

func names(m map[string]tarEntry) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func TestCopyHonoursDockerignore(t *testing.T) {
	h := newHarness(t)
	h.write(map[string]string{
		".dockerignore": "*.log\nsecret/\n!keep.log\nnode_modules\nconf\n!conf/public\n",
		"conf/private":  "p", "conf/public": "ok",
		"a.txt": "a", "x.log": "x", "keep.log": "k", "secret/key": "k",
		"sub/b.txt": "b", "sub/c.log": "c", "node_modules/m/i.js": "m",
	})
	h.mustBuild("FROM debian:bookworm\nCOPY . /app/\n", nil)
	got := strings.Join(names(h.store.lastLayer(t, "out:latest")), " ")
	want := "app app/.dockerignore app/a.txt app/conf app/conf/public app/keep.log app/sub app/sub/b.txt app/sub/c.log"
	if got != want {
		t.Fatalf("layer\n got %s\nwant %s", got, want)
	}
	for _, src := range []string{"x.log", "secret/key", "node_modules/m/i.js"} {
		_, _, _, err := h.build("FROM debian:bookworm\nCOPY "+src+" /x\n", nil)
		if err == nil || !strings.Contains(err.Error(), "excluded by .dockerignore") {
			t.Errorf("COPY %s: %v", src, err)
		}
	}
}

func TestCopyOwnershipModesAndParents(t *testing.T) {
	h := newHarness(t)
	h.write(map[string]string{"a.txt": "hello", "run.sh": "#!/bin/sh\n", "d/e/f": "f"})
	if err := os.Chmod(filepath.Join(h.ctxDir, "run.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(filepath.Join(h.ctxDir, "a.txt"), 4242, 4242); err != nil {
		t.Fatal(err)
	}
	h.mustBuild("FROM debian:bookworm\nCOPY a.txt run.sh /opt/tool/\n", nil)
	l := h.store.lastLayer(t, "out:latest")
	if e := l["opt/tool/a.txt"]; e.UID != 0 || e.GID != 0 || e.Mode != 0o644 || e.Data != "hello" {
		t.Errorf("context ownership leaked or content wrong: %+v", e)
	}
	if e := l["opt/tool/run.sh"]; e.Mode != 0o755 {
		t.Errorf("mode not kept: %o", e.Mode)
	}
	if e := l["opt"]; e.Type != tar.TypeDir || e.Mode != 0o755 || e.UID != 0 {
		t.Errorf("created parent %+v", e)
	}

	h.mustBuild("FROM debian:bookworm\nCOPY --chown=app:staff --chmod=0750 d /srv/d\n", nil)
	l = h.store.lastLayer(t, "out:latest")
	for _, p := range []string{"srv/d", "srv/d/e", "srv/d/e/f"} {
		if e := l[p]; e.UID != 1001 || e.GID != 50 || e.Mode != 0o750 {
			t.Errorf("%s: %+v", p, e)
		}
	}
	if _, ok := l["srv/d/d"]; ok {
		t.Errorf("a directory source copies its contents, not itself: %v", names(l))
	}

	h.mustBuild("FROM debian:bookworm\nCOPY --chown=app a.txt /a\nCOPY --chown=1234 a.txt /b\nCOPY --chown=7:app a.txt /c\n", nil)
	tm, _ := h.store.Resolve(t.Context(), "out:latest")
	check := func(layer int, name string, uid, gid int) {
		t.Helper()
		for _, e := range h.store.layers[tm.Layers[layer]] {
			if e.Name == name && (e.UID != uid || e.GID != gid) {
				t.Errorf("%s: %d:%d, want %d:%d", name, e.UID, e.GID, uid, gid)
			}
		}
	}
	check(1, "a", 1001, 1002) // a user's primary group
	check(2, "b", 1234, 1234)
	check(3, "c", 7, 1002)
}

func TestCopySymlinksStayInTheContext(t *testing.T) {
	h := newHarness(t)
	h.write(map[string]string{
		"a.txt": "inside", "dir/f": "f",
		"dir/rel": "->../a.txt", "dir/abs": "->/etc/shadow",
		"link-in": "->a.txt", "link-out": "->/etc/hostname", "link-up": "->../../../etc/hostname",
	})
	h.mustBuild("FROM debian:bookworm\nCOPY dir /d/\nCOPY link-in /y\n", nil)
	tm, _ := h.store.Resolve(t.Context(), "out:latest")
	first := map[string]tarEntry{}
	for _, e := range h.store.layers[tm.Layers[1]] {
		first[strings.TrimSuffix(e.Name, "/")] = e
	}
	// Symlinks inside a copied directory are copied as they are.
	if e := first["d/rel"]; e.Type != tar.TypeSymlink || e.Link != "../a.txt" {
		t.Errorf("d/rel %+v", e)
	}
	if e := first["d/abs"]; e.Type != tar.TypeSymlink || e.Link != "/etc/shadow" {
		t.Errorf("d/abs %+v", e)
	}
	// A named source symlink is followed, within the context.
	if e := h.store.lastLayer(t, "out:latest")["y"]; e.Type != tar.TypeReg || e.Data != "inside" {
		t.Errorf("y %+v", e)
	}
	for _, src := range []string{"link-out", "link-up", "../../etc/hostname", "/etc/hostname"} {
		_, _, _, err := h.build("FROM debian:bookworm\nCOPY "+src+" /x\n", nil)
		if err == nil || !strings.Contains(err.Error(), "not found in the build context") {
			t.Errorf("COPY %s reached outside the context: %v", src, err)
		}
	}
}

func TestCopyDestinationFollowsImageSymlinksAndKeepsParents(t *testing.T) {
	h := newHarness(t)
	h.write(map[string]string{"tool": "x", "a.txt": "a", "b.txt": "b", "c.md": "c"})
	h.mustBuild("FROM debian:bookworm\nCOPY tool /bin/\n", nil)
	l := h.store.lastLayer(t, "out:latest")
	if got := strings.Join(names(l), " "); got != "usr usr/bin usr/bin/tool" {
		t.Fatalf("COPY through /bin -> usr/bin wrote %s", got)
	}
	if e := l["usr/bin"]; e.Type != tar.TypeDir || e.Mode != 0o755 {
		t.Errorf("existing parent %+v", e)
	}
	h.mustBuild("FROM debian:bookworm\nWORKDIR /w\nCOPY *.txt ./\n", nil)
	if got := strings.Join(names(h.store.lastLayer(t, "out:latest")), " "); got != "w w/a.txt w/b.txt" {
		t.Fatalf("wildcard copied %s", got)
	}
	if _, _, _, err := h.build("FROM debian:bookworm\nCOPY *.none /w/\n", nil); err == nil || !strings.Contains(err.Error(), "no source files") {
		t.Errorf("empty wildcard: %v", err)
	}
	// COPY onto an existing directory without a trailing slash copies into it.
	h.mustBuild("FROM debian:bookworm\nCOPY c.md /etc\n", nil)
	if _, ok := h.store.lastLayer(t, "out:latest")["etc/c.md"]; !ok {
		t.Errorf("COPY into an existing dir: %v", names(h.store.lastLayer(t, "out:latest")))
	}
}

func TestAddExtractsLocalArchives(t *testing.T) {
	h := newHarness(t)
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	add := func(hdr *tar.Header, body string) {
		hdr.Size = int64(len(body))
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(body))
	}
	add(&tar.Header{Name: "./top/", Typeflag: tar.TypeDir, Mode: 0o700, Uid: 7, Gid: 8}, "")
	add(&tar.Header{Name: "top/f", Typeflag: tar.TypeReg, Mode: 0o4755, Uid: 7, Gid: 8}, "data")
	add(&tar.Header{Name: "../../escape", Typeflag: tar.TypeReg, Mode: 0o644}, "e")
	add(&tar.Header{Name: "top/l", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"}, "")
	add(&tar.Header{Name: "top/h", Typeflag: tar.TypeLink, Linkname: "top/f"}, "")
	add(&tar.Header{Name: "dev", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3}, "")
	tw.Close()
	zw.Close()
	if err := os.WriteFile(filepath.Join(h.ctxDir, "a.tar.gz"), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	h.write(map[string]string{"plain.txt": "not an archive"})
	h.mustBuild("FROM debian:bookworm\nADD a.tar.gz plain.txt /dst/\n", nil)
	l := h.store.lastLayer(t, "out:latest")
	if got := strings.Join(names(l), " "); got != "dst dst/escape dst/plain.txt dst/top dst/top/f dst/top/h dst/top/l" {
		t.Fatalf("ADD wrote %s", got)
	}
	if e := l["dst/top/f"]; e.UID != 7 || e.GID != 8 || e.Mode != 0o4755 || e.Data != "data" {
		t.Errorf("f %+v", e)
	}
	if e := l["dst/top/h"]; e.Type != tar.TypeLink || e.Link != "dst/top/f" {
		t.Errorf("h %+v", e)
	}
	if e := l["dst/top/l"]; e.Type != tar.TypeSymlink || e.Link != "/etc/passwd" {
		t.Errorf("l %+v", e)
	}
	// COPY does not extract; --chown applies to ADD's entries.
	h.mustBuild("FROM debian:bookworm\nCOPY a.tar.gz /c/\nADD --chown=1:2 a.tar.gz /x/\n", nil)
	l = h.store.lastLayer(t, "out:latest")
	if e := l["x/top/f"]; e.UID != 1 || e.GID != 2 {
		t.Errorf("chown on ADD: %+v", e)
	}
	tm, _ := h.store.Resolve(t.Context(), "out:latest")
	if e := h.store.layers[tm.Layers[1]]; len(e) != 2 || e[1].Name != "c/a.tar.gz" {
		t.Errorf("COPY of an archive: %+v", e)
	}
}
