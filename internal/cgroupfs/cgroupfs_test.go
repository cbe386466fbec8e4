package cgroupfs

import (
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
