package native

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/backend/backendtest"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/testutil"
)

// TestSecurityNofileLimit: sandbox processes get a small RLIMIT_NOFILE
// (not the daemon's), its hard limit keeps pids × nofile well below the
// host's file table, and a process cannot raise it past the hard limit.
func TestSecurityNofileLimit(t *testing.T) {
	testutil.RequireRoot(t)
	fileMax, err := hostFileMax()
	if err != nil {
		t.Fatal(err)
	}
	b := newTestBackend(t, testutil.ShortTempDir(t))
	const pids = 64
	box := backendtest.Create(t, b, sandbox.Spec{Template: sandbox.HostTemplate(), Resources: sandbox.Resources{PIDs: pids}})
	c := backendtest.Client(t, box, "")
	r := backendtest.Exec(t, c, `ulimit -Sn; ulimit -Hn; h=$(ulimit -Hn); ulimit -Hn $((h+1)) 2>/dev/null && echo raised || echo refused; ulimit -Sn $((h+1)) 2>/dev/null && echo raised || echo refused`)
	f := strings.Fields(r.Stdout)
	if len(f) != 4 {
		t.Fatalf("unexpected output %q (stderr %q)", r.Stdout, r.Stderr)
	}
	soft, err1 := strconv.ParseUint(f[0], 10, 64)
	hard, err2 := strconv.ParseUint(f[1], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("unexpected output %q", r.Stdout)
	}
	wantHard := uint64(DefaultNofileHard)
	if budget := fileMax / nofileShareOfFileMax / pids; budget < wantHard {
		wantHard = budget
	}
	wantSoft := min(uint64(DefaultNofileSoft), wantHard)
	if soft != wantSoft || hard != wantHard {
		t.Errorf("nofile soft/hard = %d/%d, want %d/%d", soft, hard, wantSoft, wantHard)
	}
	if pids*hard > fileMax/2 {
		t.Errorf("pids × hard nofile = %d, not well below fs.file-max %d", pids*hard, fileMax)
	}
	if f[2] != "refused" || f[3] != "refused" {
		t.Errorf("a sandbox process raised its nofile limit past the hard limit: %q", r.Stdout)
	}
	// Every process of the sandbox has the hard limit: the agent itself
	// and the exec shim running this command included.
	// (Go programs raise their own soft limit towards the hard one, and
	// give their children the soft limit they started with.)
	r = backendtest.Exec(t, c, `for f in /proc/[0-9]*/limits; do grep 'Max open files' "$f" || echo "unreadable $f"; done`)
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	if len(lines) < 3 {
		t.Fatalf("too few processes listed: %q", r.Stdout)
	}
	for _, line := range lines {
		if f := strings.Fields(line); len(f) < 5 || f[4] != strconv.FormatUint(wantHard, 10) {
			t.Errorf("a sandbox process has another hard open-file limit than %d: %q", wantHard, line)
		}
	}
}

// TestSecurityNofileClamp: the configured limits are clamped so that a
// sandbox's processes together cannot hold more than its share of the
// host's file table, whatever pids limit it asks for.
func TestSecurityNofileClamp(t *testing.T) {
	for _, tc := range []struct {
		soft, hard, fileMax, pids uint64
		wantSoft, wantHard        uint64
	}{
		{1024, 4096, 1 << 30, 256, 1024, 4096},         // plenty: as configured
		{1024, 4096, 2466170, 256, 1024, 2408},         // a 24 GiB host: clamped
		{1024, 4096, 2466170, 4096, 150, 150},          // many pids: soft follows hard
		{1024, 4096, 1000, 4096, minNofile, minNofile}, // tiny table: the floor
		{8192, 4096, 1 << 40, 256, 4096, 4096},         // soft never above hard
	} {
		t.Run(fmt.Sprintf("%d-%d-%d-%d", tc.soft, tc.hard, tc.fileMax, tc.pids), func(t *testing.T) {
			soft, hard := clampNofile(tc.soft, tc.hard, tc.fileMax, tc.pids)
			if soft != tc.wantSoft || hard != tc.wantHard {
				t.Fatalf("clampNofile = %d/%d, want %d/%d", soft, hard, tc.wantSoft, tc.wantHard)
			}
		})
	}
}
