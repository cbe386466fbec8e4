package seccompprofile

import (
	"encoding/json"
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// TestDockerProfile: the engine's JSON refuses every denied syscall with
// EPERM (clone3 with ENOSYS) and allows none of them anywhere; prlimit64
// only on the caller itself or to read.
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
		// prlimit64 sets only the caller's own limits (pid 0) or reads.
		var prlimit [][]specs.LinuxSeccompArg
		for _, r := range prof.Syscalls {
			if slices.Contains(r.Names, "prlimit64") {
				if r.Action != specs.ActAllow || len(r.Args) != 1 || r.Args[0].Op != specs.OpEqualTo || r.Args[0].Value != 0 {
					t.Errorf("caps %v: prlimit64 %s with arguments %+v", caps, r.Action, r.Args)
				}
				prlimit = append(prlimit, r.Args)
			}
		}
		if len(prlimit) != 2 || prlimit[0][0].Index != 0 || prlimit[1][0].Index != 2 {
			t.Errorf("caps %v: prlimit64 rules %+v, want pid 0 or no new limit", caps, prlimit)
		}
		if prof.DefaultAction != specs.ActErrno || prof.DefaultErrnoRet == nil || *prof.DefaultErrnoRet != 1 {
			t.Errorf("caps %v: default action %s, want EPERM", caps, prof.DefaultAction)
		}
	}
}
