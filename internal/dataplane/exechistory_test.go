package dataplane

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
)

func TestExecHistoryBounded(t *testing.T) {
	var h execHistory
	t0 := time.Unix(1000, 0)
	for i := 0; i < execHistoryPerSandbox+5; i++ {
		h.add("a", ExecRecord{Time: t0.Add(time.Duration(i) * time.Second), Cmd: fmt.Sprint(i)})
	}
	got := h.get("a")
	if len(got) != execHistoryPerSandbox || got[0].Cmd != "5" || got[len(got)-1].Cmd != fmt.Sprint(execHistoryPerSandbox+4) {
		t.Fatalf("kept %d, first %q, last %q", len(got), got[0].Cmd, got[len(got)-1].Cmd)
	}
	// Past the sandbox bound the one with the oldest last command goes ("a" ran last at t0+104s).
	h.add("old", ExecRecord{Time: t0.Add(-time.Hour), Cmd: "x"})
	for i := 2; i < execHistorySandboxes; i++ {
		h.add(sandbox.ID(fmt.Sprint("s", i)), ExecRecord{Time: t0.Add(time.Hour)})
	}
	h.add("new", ExecRecord{Time: t0.Add(2 * time.Hour)})
	if len(h.runs) != execHistorySandboxes || h.get("old") != nil || h.get("a") == nil || h.get("new") == nil {
		t.Fatalf("%d sandboxes; old kept %v, a kept %v", len(h.runs), h.get("old") != nil, h.get("a") != nil)
	}
}

func TestCmdLineCut(t *testing.T) {
	if s, cut := cmdLine([]string{"echo", "hi"}); s != "echo hi" || cut {
		t.Fatalf("%q %v", s, cut)
	}
	long := strings.Repeat("é", execHistoryCmdMax) // 2 bytes each
	s, cut := cmdLine([]string{"x" + long})
	if !cut || len(s) > execHistoryCmdMax || !strings.HasPrefix("x"+long, s) || strings.ContainsRune(s, '\uFFFD') {
		t.Fatalf("cut %v, %d bytes", cut, len(s))
	}
}
