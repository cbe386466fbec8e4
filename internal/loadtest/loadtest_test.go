package loadtest

import (
	"bytes"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestWriteSVG: the chart is well-formed XML with one curve per series,
// and text is escaped.
func TestWriteSVG(t *testing.T) {
	var b bytes.Buffer
	series := []Series{
		{Name: "rss <daemon>", Unit: "MiB", Color: "#1f77b4", Points: [][2]float64{{0, 30}, {5, 42.5}, {10, 31}}},
		{Name: "fds", Unit: "count", Color: "#ff7f0e", Points: [][2]float64{{0, 20}, {10, 25}}},
	}
	if err := WriteSVG(&b, "soak & co", series, []float64{5}); err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(&b)
	polylines := 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "polyline" {
			polylines++
		}
	}
	if polylines != 2 {
		t.Fatalf("%d curves, want 2", polylines)
	}
}

// TestLeaks: per-sandbox objects of live sandboxes are fine, of gone ones
// are leaks; other objects must match the baseline; daemon figures are
// bounded.
func TestLeaks(t *testing.T) {
	before := Snapshot{FDs: 20, Goroutines: 20, RSS: 30 << 20, Sandboxes: []string{"a", "b"},
		Mounts: []string{"/d/templates", "/d/native/state/sb/a/disk", "/d/native/state/sb/b/disk"}}
	after := Snapshot{FDs: 30, Goroutines: 25, RSS: 60 << 20, Sandboxes: []string{"b", "c"},
		Mounts: []string{"/d/templates", "/d/native/state/sb/b/disk", "/d/native/state/sb/c/disk"}}
	if l := Leaks(before, after, DefaultBounds); len(l) != 0 {
		t.Fatalf("pool turnover reported as leaks: %v", l)
	}
	after.Mounts = append(after.Mounts, "/d/native/state/sb/a/disk", "/d/other")
	after.FDs = 100
	after.Sandboxes = append(after.Sandboxes, "x")
	l := strings.Join(Leaks(before, after, DefaultBounds), "\n")
	for _, want := range []string{"sb/a/disk", "/d/other", "fds 20 -> 100", "live sandboxes 2 -> 3"} {
		if !strings.Contains(l, want) {
			t.Errorf("leaks do not mention %q:\n%s", want, l)
		}
	}
}

// TestPercentile and the report's shape.
func TestReport(t *testing.T) {
	rc := &recorder{res: &Result{Ops: map[string]*OpStats{}, Errors: map[string]int{}}}
	for i := 1; i <= 100; i++ {
		rc.op("exec", time.Duration(i)*time.Millisecond, 0, nil)
	}
	rc.op("create", time.Millisecond, 0, &kindError{"quota_exceeded", io.EOF})
	rc.op("create", time.Millisecond, 0, io.ErrUnexpectedEOF)
	rc.res.Elapsed = time.Second
	if p := rc.res.Ops["exec"].Percentile(50); p != 50*time.Millisecond {
		t.Errorf("p50 = %s", p)
	}
	if p := rc.res.Ops["exec"].Percentile(99); p != 99*time.Millisecond {
		t.Errorf("p99 = %s", p)
	}
	if rc.res.Unexpected() != 1 || rc.res.Errors["transport"] != 1 {
		t.Errorf("errors %v", rc.res.Errors)
	}
	var b bytes.Buffer
	rc.res.Report(&b)
	if !strings.Contains(b.String(), "quota_exceeded") || !strings.Contains(b.String(), "expected (quota/capacity)") {
		t.Errorf("report:\n%s", b.String())
	}
}

// The kernel counters read this host's real files: a controller is
// counted (the memory controller on v1, the unified hierarchy on v2), the
// caches are non-empty, and the data dir's bytes are counted.
func TestTakeKernel(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "agentbox.db"), make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	k := TakeKernel(dir)
	if _, v1 := k.Dying["memory"]; !v1 {
		if _, v2 := k.Dying["unified"]; !v2 {
			t.Fatalf("neither the memory controller nor the unified hierarchy counted: %+v", k)
		}
	}
	if k.DataDirBytes != 4096 || k.StateBytes != 4096 {
		t.Errorf("data dir %d bytes, state %d bytes; want 4096 each", k.DataDirBytes, k.StateBytes)
	}
	if k.Dentries <= 0 || k.SlabKiB <= 0 {
		t.Errorf("dentries %d, slab %d KiB", k.Dentries, k.SlabKiB)
	}
	if s := k.String(); !strings.Contains(s, "dying cgroups [") {
		t.Errorf("String() = %q", s)
	}
}
