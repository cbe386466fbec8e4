package agent_test

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/agent/agenttest"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// TestSecurityConfinedRace: while a goroutine swaps a directory under the
// root for a symbolic link to a directory outside (and back) in a tight
// loop, 1,000 confined reads, writes, stats, lists, mkdirs, moves and
// removes through that directory never read, create, change or remove
// anything outside the root. The outside directory holds canaries named
// like every file the calls touch, with content and sizes no file inside
// has; whatever a call answers is checked against them, and afterwards
// nothing outside may differ from before.
func TestSecurityConfinedRace(t *testing.T) {
	a, c := startAgent(t, agenttest.Options{LogLevel: "warn"})
	ctx := testCtx(t)
	base, err := os.MkdirTemp(a.Dir, "race-")
	if err != nil {
		t.Fatal(err)
	}
	ws, out := filepath.Join(base, "ws"), filepath.Join(base, "out")
	d := filepath.Join(ws, "d")
	for _, dir := range []string{d, out} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The other half of the swap: a link to the outside directory.
	swap := filepath.Join(ws, "swap")
	if err := os.Symlink(out, swap); err != nil {
		t.Fatal(err)
	}
	const n = 1000
	const canary = "CANARY: outside the root, never to be read"
	put := func(p, content string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	put(filepath.Join(d, "f"), "inside")
	put(filepath.Join(out, "f"), canary)
	for i := range n {
		switch i % 7 {
		case 1: // writes: every other target already exists outside
			if i%2 == 0 {
				put(filepath.Join(out, fmt.Sprintf("w-%d", i)), canary)
			}
		case 5: // moves
			put(filepath.Join(d, fmt.Sprintf("mv-%d", i)), "to move")
			put(filepath.Join(out, fmt.Sprintf("mv-%d", i)), canary)
		case 6: // removes
			put(filepath.Join(d, fmt.Sprintf("rm-%d", i)), "to remove")
			put(filepath.Join(out, fmt.Sprintf("rm-%d", i)), canary)
		}
	}
	if err := os.Mkdir(filepath.Join(out, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	put(filepath.Join(out, "sub", "canary-deep"), canary)
	outside := func() map[string]string {
		snap := snapshotTree(t, base)
		for p := range snap {
			if p == ws || strings.HasPrefix(p, ws+"/") {
				delete(snap, p)
			}
		}
		return snap
	}
	before := outside()

	// The swapper exchanges d (the directory) and swap (the link out)
	// atomically, over and over, until the calls are done.
	stop := make(chan struct{})
	swapped := make(chan struct{})
	var swaps atomic.Int64
	var swapErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := unix.Renameat2(unix.AT_FDCWD, d, unix.AT_FDCWD, swap, unix.RENAME_EXCHANGE); err != nil {
				swapErr = err
				close(swapped)
				return
			}
			if swaps.Add(1) == 1 {
				close(swapped)
			}
		}
	}()
	<-swapped
	if swapErr != nil {
		t.Fatalf("RENAME_EXCHANGE: %v", swapErr)
	}

	cc := c.Confined(ws)
	var escapes []string
	var mu sync.Mutex
	outcomes := map[string]int{}
	escaped := func(format string, args ...any) {
		mu.Lock()
		escapes = append(escapes, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	op := func(i int) (string, error) {
		// Alternately relative to the root and absolute.
		p := func(name string) string {
			if i%2 == 0 {
				return "d/" + name
			}
			return filepath.Join(d, name)
		}
		switch i % 7 {
		case 0:
			rc, _, err := cc.Download(ctx, p("f"), "")
			if err != nil {
				return "read", err
			}
			b, err := io.ReadAll(rc)
			rc.Close()
			if strings.Contains(string(b), "CANARY") {
				escaped("read %s: %q", p("f"), b)
			}
			return "read", err
		case 1:
			_, err := cc.Upload(ctx, p(fmt.Sprintf("w-%d", i)), "", strings.NewReader("written"))
			return "write", err
		case 2:
			e, err := cc.Stat(ctx, p("f"), "")
			if err == nil && e.Size != int64(len("inside")) {
				escaped("stat %s: %+v", p("f"), e)
			}
			return "stat", err
		case 3:
			es, err := cc.ListDir(ctx, p(""), "", 3)
			for _, e := range es {
				if strings.HasPrefix(e.Name, "canary") || e.Size == int64(len(canary)) {
					escaped("list %s: %+v", p(""), e)
				}
			}
			return "list", err
		case 4:
			_, err := cc.MakeDir(ctx, p(fmt.Sprintf("m-%d/x", i)), "")
			return "mkdir", err
		case 5:
			_, err := cc.Move(ctx, p(fmt.Sprintf("mv-%d", i)), p(fmt.Sprintf("moved/mv-%d", i)), "")
			return "move", err
		default:
			return "remove", cc.Remove(ctx, p(fmt.Sprintf("rm-%d", i)), "")
		}
	}
	next := atomic.Int64{}
	var workers sync.WaitGroup
	for range 8 {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				kind, err := op(i)
				outcome := "ok"
				switch {
				case err == nil:
				case errors.Is(err, agentclient.ErrOutsideRoot):
					outcome = "outside-root"
				default:
					outcome = string(sandbox.ClassOf(err))
					if c := sandbox.ClassOf(err); c == sandbox.ClassInternal || c == sandbox.ClassUnavailable {
						escaped("%s %d failed unexpectedly: %v", kind, i, err)
					}
				}
				mu.Lock()
				outcomes[kind+" "+outcome]++
				mu.Unlock()
			}
		}()
	}
	workers.Wait()
	close(stop)
	wg.Wait()
	if swapErr != nil {
		t.Fatalf("RENAME_EXCHANGE: %v", swapErr)
	}
	t.Logf("%d swaps during %d calls; outcomes: %v", swaps.Load(), n, outcomes)
	for _, e := range escapes {
		t.Error(e)
	}
	after := outside()
	for p, desc := range before {
		if after[p] != desc {
			t.Errorf("outside the root, %s changed: %q, was %q", p, after[p], desc)
		}
	}
	for p, desc := range after {
		if _, ok := before[p]; !ok {
			t.Errorf("outside the root, %s appeared: %q", p, desc)
		}
	}
}

// BenchmarkConfinedStat: Stat of a file three directories below the
// workspace, unconfined (E2B semantics, one lstat) and confined to two
// roots (the roots opened, each component opened and checked).
func BenchmarkConfinedStat(b *testing.B) {
	a := agenttest.Start(b, agenttest.Options{LogLevel: "warn"})
	c := a.Client(b, "")
	ws := filepath.Join(a.Dir, "ws")
	tmp := filepath.Join(a.Dir, "tmp")
	for _, dir := range []string{ws + "/a/b/c", tmp} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	file := ws + "/a/b/c/file"
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		c    *agentclient.Client
	}{{"unconfined", c}, {"confined", c.Confined(ws, tmp)}} {
		b.Run(bc.name, func(b *testing.B) {
			ctx := b.Context()
			for b.Loop() {
				if _, err := bc.c.Stat(ctx, file, ""); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
