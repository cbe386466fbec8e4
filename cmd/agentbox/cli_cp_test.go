package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/units"
)

func TestCpUpload(t *testing.T) {
	fs, id := newFake(t)
	dir := t.TempDir()
	local := filepath.Join(dir, "data.csv")
	content := bytes.Repeat([]byte("a,b,c\n"), 50000)
	if err := os.WriteFile(local, content, 0o644); err != nil {
		t.Fatal(err)
	}

	cases := []struct{ dst, want string }{
		{id + ":/workspace/x.csv", "/workspace/x.csv"}, // a file path
		{id + ":/workspace/in/", "/workspace/in/data.csv"},
		{id + ":", "/home/user/data.csv"},           // the home directory
		{id + ":/workspace", "/workspace/data.csv"}, // an existing directory
	}
	for _, tc := range cases {
		r := runCLI(t, fs.URL, "", "cp", local, tc.dst)
		if r.code != 0 || r.stderr != "" {
			t.Fatalf("cp %s: exit %d msg %q stderr %q", tc.dst, r.code, r.msg, r.stderr)
		}
		if got, ok := fs.File(id, tc.want); !ok || !bytes.Equal(got, content) {
			t.Errorf("cp to %s: %s has %d bytes (present %v)", tc.dst, tc.want, len(got), ok)
		}
	}

	r := runCLI(t, fs.URL, "from stdin", "--json", "cp", "-", id+":notes.txt")
	var out map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || out["bytes"] != float64(10) || out["destination"] != id+":notes.txt" {
		t.Errorf("cp - --json: %q (%v)", r.stdout, err)
	}
	if got, _ := fs.File(id, "/home/user/notes.txt"); string(got) != "from stdin" {
		t.Errorf("stdin upload = %q", got)
	}
	if r := runCLI(t, fs.URL, "x", "cp", "-", id+":/workspace/"); r.code != 2 {
		t.Errorf("stdin into a directory: exit %d %q", r.code, r.msg)
	}
	if r := runCLI(t, fs.URL, "", "cp", dir, id+":/workspace/"); r.code != 1 || !strings.Contains(r.msg, "is a directory") {
		t.Errorf("directory upload: exit %d %q", r.code, r.msg)
	}
	if r := runCLI(t, fs.URL, "", "cp", filepath.Join(dir, "nope"), id+":/x"); r.code != 1 || !strings.Contains(r.msg, "no such file") {
		t.Errorf("missing local file: exit %d %q", r.code, r.msg)
	}
	if r := runCLI(t, fs.URL, "", "cp", local, "missing:/x"); r.code != 1 || !strings.Contains(r.msg, "not found") {
		t.Errorf("missing sandbox: exit %d %q", r.code, r.msg)
	}
}

func TestCpDownload(t *testing.T) {
	fs, id := newFake(t)
	content := bytes.Repeat([]byte{0, 1, 2, 0xff}, 100000) // binary survives
	fs.PutFile(id, "/workspace/out.bin", content)
	dir := t.TempDir()

	local := filepath.Join(dir, "copy.bin")
	if r := runCLI(t, fs.URL, "", "cp", id+":/workspace/out.bin", local); r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.msg)
	}
	if got, _ := os.ReadFile(local); !bytes.Equal(got, content) {
		t.Errorf("file has %d bytes, want %d", len(got), len(content))
	}
	if st, _ := os.Stat(local); st.Mode().Perm() != 0o644 {
		t.Errorf("mode = %v", st.Mode())
	}

	if r := runCLI(t, fs.URL, "", "cp", id+":/workspace/out.bin", dir); r.code != 0 {
		t.Fatalf("into dir: exit %d: %s", r.code, r.msg)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "out.bin")); !bytes.Equal(got, content) {
		t.Errorf("into dir: %d bytes", len(got))
	}

	r := runCLI(t, fs.URL, "", "cp", id+":/workspace/out.bin", "-")
	if r.code != 0 || r.stdout != string(content) {
		t.Errorf("to stdout: exit %d, %d bytes", r.code, len(r.stdout))
	}

	r = runCLI(t, fs.URL, "", "cp", id+":/workspace/missing", filepath.Join(dir, "m"))
	if r.code != 1 || !strings.Contains(r.msg, "no such file") {
		t.Errorf("missing remote: exit %d %q", r.code, r.msg)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".part") || e.Name() == "m" {
			t.Errorf("left behind %s", e.Name())
		}
	}
}

func TestParseCpPath(t *testing.T) {
	for in, want := range map[string]cpPath{
		"abc123:/x/y":   {id: "abc123", path: "/x/y"},
		"my-box:rel":    {id: "my-box", path: "rel"},
		"box:":          {id: "box", path: ""},
		"./name:x":      {path: "./name:x"},
		"/abs/path":     {path: "/abs/path"},
		"-":             {path: "-"},
		"C:/windows":    {path: "C:/windows"},
		"Upper:case":    {path: "Upper:case"},
		"-bad:id":       {path: "-bad:id"},
		"plainfile.txt": {path: "plainfile.txt"},
	} {
		if got := parseCpPath(in); got != want {
			t.Errorf("parseCpPath(%q) = %+v, want %+v", in, got, want)
		}
	}
}

func TestProgressMeter(t *testing.T) {
	var buf safeBuffer
	p := startProgress(&buf, 100, true, 5*time.Millisecond, 5*time.Millisecond)
	p.set(50)
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(buf.String(), "50 B / 100 B (50%)") {
		if time.Now().After(deadline) {
			t.Fatalf("no progress line: %q", buf.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	p.set(100)
	p.finish()
	if out := buf.String(); !strings.HasSuffix(out, "\n") || !strings.Contains(out, "100 B / 100 B (100%)") {
		t.Errorf("final output %q", out)
	}

	// Quick transfers print nothing.
	var quiet safeBuffer
	p = startProgress(&quiet, -1, true, time.Hour, time.Millisecond)
	p.set(10)
	p.finish()
	if quiet.String() != "" {
		t.Errorf("quick transfer printed %q", quiet.String())
	}
	if got := (&progressMeter{total: -1}).line(3<<20, 2*time.Second); got != "3.0 MiB  1.5 MiB/s" {
		t.Errorf("line = %q", got)
	}
}

func TestFormatting(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 45 * time.Second: "45s", 12*time.Minute + 30*time.Second: "12m",
		3*time.Hour + 4*time.Minute: "3h4m", 5 * time.Hour: "5h", 50 * time.Hour: "2d2h", 72 * time.Hour: "3d",
	} {
		if got := shortDuration(d); got != want {
			t.Errorf("shortDuration(%s) = %q, want %q", d, got, want)
		}
	}
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1536: "1.5 KiB", 1 << 30: "1.0 GiB"} {
		if got := units.FormatBytes(n); got != want {
			t.Errorf("units.FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
	for in, want := range map[string]time.Duration{"90": 90 * time.Second, "1.5": 1500 * time.Millisecond, "2h": 2 * time.Hour} {
		if got, err := parseTimeout(in); err != nil || got != want {
			t.Errorf("parseTimeout(%q) = %s, %v", in, got, err)
		}
	}
	for _, in := range []string{"0", "-5", "-1m", "soon"} {
		if _, err := parseTimeout(in); err == nil {
			t.Errorf("parseTimeout(%q) accepted", in)
		}
	}
}
