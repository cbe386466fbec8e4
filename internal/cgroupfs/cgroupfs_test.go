package cgroupfs

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestRead(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if got := ReadInt(write("limit", "max\n")); got != -1 {
		t.Errorf("max = %d, want -1", got)
	}
	if got := ReadInt(write("usage", "12345\n")); got != 12345 {
		t.Errorf("usage = %d", got)
	}
	if got := ReadInt(filepath.Join(dir, "missing")); got != 0 {
		t.Errorf("missing file = %d, want 0", got)
	}
	stat := write("memory.stat", "cache 10\nrss 20\ntotal_rss 30\n")
	if got := ReadKey(stat, "rss"); got != 20 {
		t.Errorf("rss = %d, want 20", got)
	}
	if got := ReadKey(stat, "swap"); got != 0 {
		t.Errorf("absent key = %d, want 0", got)
	}
}

func TestFileRereads(t *testing.T) {
	p := filepath.Join(t.TempDir(), "memory.events")
	if err := os.WriteFile(p, []byte("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, c := range []struct {
		key  string
		want int64
	}{{"oom_kill", 1}, {"max", 3}, {"oom", 1}, {"absent", 0}} {
		if got, err := f.Key(c.key); err != nil || got != c.want {
			t.Errorf("Key(%q) = %d, %v; want %d", c.key, got, err, c.want)
		}
	}
	// Every read starts again at the beginning and sees the current content.
	if err := os.WriteFile(p, []byte("oom 2\noom_kill 7\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := f.Key("oom_kill"); err != nil || got != 7 {
		t.Errorf("after rewrite: oom_kill = %d, %v; want 7", got, err)
	}
	if _, err := Open(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("Open of a missing file succeeded")
	}
	// A file too large for one read is an error, not a silent partial read.
	if err := os.WriteFile(p, bytes.Repeat([]byte("x 1\n"), fileBuf), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Key("x"); err == nil {
		t.Error("oversized file read without error")
	}
}
