package sandboxrunner

import (
	"archive/tar"
	"bytes"
	"io"
	"slices"
	"testing"
)

type entry struct {
	name string
	typ  byte
	mode int64
	body string
	link string
}

func layerOf(t *testing.T, es []entry) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range es {
		mode := e.mode
		if mode == 0 {
			mode = 0o755
		}
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: mode, Size: int64(len(e.body)), Linkname: e.link}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(e.body))
	}
	tw.Close()
	return &buf
}

func names(t *testing.T, r io.Reader) []string {
	t.Helper()
	var out []string
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, h.Name)
	}
}

// The mount targets, what is below them and the directories made only to
// hold them never reach the step's layer; everything else does.
func TestFilterLayerDropsMountsAndTheirStubs(t *testing.T) {
	in := layerOf(t, []entry{
		{name: "etc/", typ: tar.TypeDir},                                // copied up for the stub below, unchanged
		{name: "etc/apt/", typ: tar.TypeDir},                            // unchanged stub parent
		{name: "etc/apt/auth.conf", typ: tar.TypeReg, body: ""},         // secret mount point
		{name: "root/", typ: tar.TypeDir, mode: 0o700},                  // chmodded by the step: kept
		{name: "root/.cache/", typ: tar.TypeDir},                        // stub parent with other content: kept
		{name: "root/.cache/pip/", typ: tar.TypeDir},                    // cache mount point
		{name: "root/.cache/pip/wheel", typ: tar.TypeReg, body: "data"}, // under a cache mount
		{name: "root/.cache/other", typ: tar.TypeReg, body: "kept"},
		{name: "usr/.wh.secret", typ: tar.TypeReg}, // whiteout of a target
		{name: "usr/bin/tool", typ: tar.TypeReg, body: "#!"},
	})
	pre := map[string]dirState{
		"etc": {mode: 0o755}, "etc/apt": {mode: 0o755}, "root": {mode: 0o755}, "root/.cache": {mode: 0o755},
	}
	var out bytes.Buffer
	if err := filterLayer(in, &out, []string{"/etc/apt/auth.conf", "/root/.cache/pip", "/usr/secret"}, pre); err != nil {
		t.Fatal(err)
	}
	got := names(t, &out)
	want := []string{"root/", "root/.cache/", "root/.cache/other", "usr/bin/tool"}
	if !slices.Equal(got, want) {
		t.Fatalf("layer holds %v, want %v", got, want)
	}
}

// A hard link into a mount would carry its content: refused.
func TestFilterLayerRefusesLinksIntoMounts(t *testing.T) {
	in := layerOf(t, []entry{{name: "x", typ: tar.TypeLink, link: "run/secrets/token"}})
	if err := filterLayer(in, io.Discard, []string{"/run/secrets/token"}, nil); err == nil {
		t.Fatal("a hard link into a secret mount was accepted")
	}
}
