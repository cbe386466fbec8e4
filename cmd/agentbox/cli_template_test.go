package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/client/fakeserver"
)

func TestTemplateLs(t *testing.T) {
	fs := fakeserver.New(t)
	fs.AddTemplate("library/python:3.12", 300<<20, 3, 2)
	res := runCLI(t, fs.URL, "", "template", "ls")
	if res.code != 0 {
		t.Fatalf("ls: %+v", res)
	}
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "NAME") || !strings.Contains(lines[0], "IN USE") {
		t.Fatalf("table:\n%s", res.stdout)
	}
	f := strings.Fields(lines[2])
	if f[0] != "library/python" || f[1] != "3.12" || f[2] != "image" || f[3] != "300.0" || f[5] != "3" || f[6] != "2" {
		t.Errorf("row %q", lines[2])
	}
	res = runCLI(t, fs.URL, "", "template", "ls", "--json")
	var list []client.Template
	if err := json.Unmarshal([]byte(res.stdout), &list); err != nil || len(list) != 2 || list[1].InUse != 2 || len(list[1].Layers) != 3 {
		t.Fatalf("json: %v %s", err, res.stdout)
	}
}

func TestTemplatePullAndRm(t *testing.T) {
	fs := fakeserver.New(t)
	res := runCLI(t, fs.URL, "", "template", "pull", "ghcr.io/org/app:1", "-t", "app:v1", "--platform", "linux/arm64")
	if res.code != 0 || !strings.HasPrefix(res.stdout, "app:v1  sha256:") || !strings.Contains(res.stdout, "2 layers") {
		t.Fatalf("pull: %+v", res)
	}
	res = runCLI(t, fs.URL, "", "--json", "template", "pull", "missing:1")
	var e jsonError
	if res.code != 1 || json.Unmarshal([]byte(res.stderr), &e) != nil || e.Code != "not_found" || !strings.Contains(e.Message, "manifest unknown") || res.msg != "" {
		t.Fatalf("failed pull: %+v", res)
	}
	fs.AddTemplate("busy", 1, 1, 1)
	res = runCLI(t, fs.URL, "", "template", "rm", "busy")
	if res.code != 1 || !strings.Contains(res.msg, "in use") {
		t.Fatalf("rm busy: %+v", res)
	}
	res = runCLI(t, fs.URL, "", "template", "rm", "app:v1")
	if res.code != 0 || res.stdout != "deleted app:v1\n" {
		t.Fatalf("rm: %+v", res)
	}
	if res := runCLI(t, fs.URL, "", "template", "rm", "app:v1"); res.code != 1 {
		t.Fatalf("rm again: %+v", res)
	}
	if res := runCLI(t, fs.URL, "", "template", "pull"); res.code != 2 {
		t.Fatalf("pull without REF: %+v", res)
	}
}

// A tarball is sent as it is; a directory is tarred on the fly with its
// files, links and modes; export writes the template's bytes back.
func TestTemplateImportExport(t *testing.T) {
	fs := fakeserver.New(t)
	dir := t.TempDir()
	tarball := filepath.Join(dir, "img.tar")
	os.WriteFile(tarball, []byte("a docker save tarball"), 0o644)
	res := runCLI(t, fs.URL, "", "template", "import", tarball, "-t", "img:1")
	if res.code != 0 || string(fs.TemplateData("img:1")) != "a docker save tarball" {
		t.Fatalf("import file: %+v", res)
	}

	rootfs := filepath.Join(dir, "rootfs")
	os.MkdirAll(filepath.Join(rootfs, "usr/bin"), 0o755)
	os.WriteFile(filepath.Join(rootfs, "usr/bin/tool"), []byte("#!/bin/sh\necho hi\n"), 0o755)
	os.Link(filepath.Join(rootfs, "usr/bin/tool"), filepath.Join(rootfs, "usr/bin/tool2"))
	os.Symlink("/usr/bin/tool", filepath.Join(rootfs, "tool-link"))
	res = runCLI(t, fs.URL, "", "template", "import", rootfs, "-t", "rootfs")
	if res.code != 0 {
		t.Fatalf("import dir: %+v", res)
	}
	got := map[string]*tar.Header{}
	tr := tar.NewReader(bytes.NewReader(fs.TemplateData("rootfs")))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got[h.Name] = h
	}
	if h := got["usr/bin/tool"]; h == nil || h.Mode&0o777 != 0o755 || h.Size != 18 {
		t.Errorf("tool: %+v", h)
	}
	if h := got["usr/bin/tool2"]; h == nil || h.Typeflag != tar.TypeLink || h.Linkname != "usr/bin/tool" {
		t.Errorf("hard link: %+v", h)
	}
	if h := got["tool-link"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "/usr/bin/tool" {
		t.Errorf("symlink: %+v", h)
	}
	if got["usr/"] == nil || got["usr/bin/"] == nil {
		t.Errorf("directories missing: %v", got)
	}

	if res := runCLI(t, fs.URL, "", "template", "import", tarball); res.code != 2 {
		t.Fatalf("import without -t: %+v", res)
	}
	out := filepath.Join(dir, "out.tar")
	res = runCLI(t, fs.URL, "", "template", "export", "img:1", "-o", out, "--format", "oci")
	if data, _ := os.ReadFile(out); res.code != 0 || string(data) != "a docker save tarball" {
		t.Fatalf("export: %+v %q", res, data)
	}
	res = runCLI(t, fs.URL, "", "template", "export", "nope", "-o", filepath.Join(dir, "nope.tar"))
	if _, err := os.Stat(filepath.Join(dir, "nope.tar")); res.code != 1 || err == nil {
		t.Fatalf("failed export: %+v, file %v", res, err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*part*")); len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
	if res := runCLI(t, fs.URL, "", "template", "export", "img:1", "-o", out, "--format", "zip"); res.code != 2 {
		t.Fatalf("bad format: %+v", res)
	}
}

func TestProgressLine(t *testing.T) {
	ev := client.TemplateProgress{Layer: "sha256:0123456789abcdef", Status: "downloading", Current: 1 << 20, Total: 4 << 20}
	if got := progressLine(ev); !strings.HasPrefix(got, "0123456789ab  downloading") || !strings.Contains(got, "/") {
		t.Errorf("line %q", got)
	}
	var buf bytes.Buffer
	pd := newPullDisplay(&buf, true)
	pd.update(ev)
	ev.Status = "done"
	pd.update(ev)
	pd.finish()
	if !strings.Contains(buf.String(), "done") {
		t.Errorf("display: %q", buf.String())
	}
}
