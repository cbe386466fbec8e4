package agent

import (
	"syscall"
	"testing"
)

func TestApplyRlimits(t *testing.T) {
	var before syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &before); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"nofile", "nofile=1", "nofile=a:b", "nofile=10:5", "stack=1:2", "nofile=64:64,,"} {
		if err := ApplyRlimits(bad); err == nil {
			t.Errorf("ApplyRlimits(%q) accepted", bad)
		}
	}
	// A bad spec sets nothing, not even its valid items.
	var after syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &after); err != nil || after != before {
		t.Fatalf("RLIMIT_NOFILE changed by rejected specs: %+v -> %+v", before, after)
	}
	if err := ApplyRlimits(""); err != nil {
		t.Errorf("empty spec: %v", err)
	}
	// Lowering needs no privilege; core dumps are harmless to give up here.
	if err := ApplyRlimits("core=0:0"); err != nil {
		t.Fatal(err)
	}
	var got syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_CORE, &got); err != nil || got.Cur != 0 || got.Max != 0 {
		t.Errorf("RLIMIT_CORE = %+v %v, want 0:0", got, err)
	}
}
