package seccompprofile

import (
	"encoding/json"
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// TestDockerProfile: the engine's JSON refuses every denied syscall with
// EPERM (clone3 with ENOSYS) and allows none of them anywhere.
func TestDockerProfile(t *testing.T) {
	for _, caps := range [][]string{nil, {"CAP_SETUID", "CAP_SYS_ADMIN"}} {
		data, err := Docker(caps)
		if err != nil {
			t.Fatal(err)
		}
		var prof specs.LinuxSeccomp
		if err := json.Unmarshal(data, &prof); err != nil {
			t.Fatal(err)
		}
		if prof.DefaultAction == specs.ActAllow || len(prof.Architectures) == 0 {
			t.Fatalf("default action %q, architectures %v", prof.DefaultAction, prof.Architectures)
		}
		refused := map[string]uint{}
		for _, r := range prof.Syscalls {
			for _, n := range r.Names {
				switch {
				case r.Action == specs.ActErrno && r.ErrnoRet != nil:
					refused[n] = *r.ErrnoRet
				case r.Action == specs.ActAllow && (slices.Contains(DeniedSyscalls, n) || n == "clone3"):
					t.Errorf("caps %v: %s allowed by a rule", caps, n)
				}
			}
		}
		for _, n := range DeniedSyscalls {
			if refused[n] != 1 { // EPERM
				t.Errorf("caps %v: %s not refused with EPERM (%d)", caps, n, refused[n])
			}
		}
		if refused["clone3"] != 38 { // ENOSYS
			t.Errorf("clone3 not refused with ENOSYS")
		}
	}
}
