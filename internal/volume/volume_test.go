package volume

import (
	"testing"

	"github.com/agentbox/agentbox/internal/sandbox"
)

func TestCheckMounts(t *testing.T) {
	ok := [][]sandbox.VolumeMount{
		{{Name: "a", Path: "/data"}},
		{{Name: "a", Path: "/data"}, {Name: "a", Path: "/other", ReadOnly: true, SubPath: "x/y"}},
		{{Name: "a.b_c-1", Path: "/mnt/v", SubPath: "/"}},
	}
	for _, ms := range ok {
		if err := CheckMounts(ms); err != nil {
			t.Errorf("CheckMounts(%v) = %v", ms, err)
		}
	}
	bad := [][]sandbox.VolumeMount{
		{{Name: "", Path: "/data"}},
		{{Name: "../x", Path: "/data"}},
		{{Name: "a", Path: "data"}},
		{{Name: "a", Path: "/"}},
		{{Name: "a", Path: "/data/../etc"}},
		{{Name: "a", Path: "/data/"}},
		{{Name: "a", Path: "/a,b"}},
		{{Name: "a", Path: "/data"}, {Name: "b", Path: "/data"}},
		{{Name: "a", Path: "/data"}, {Name: "b", Path: "/data/in"}},
		{{Name: "a", Path: "/data", SubPath: "../x"}},
		{{Name: "a", Path: "/data", SubPath: "x/../../y"}},
	}
	for _, ms := range bad {
		if err := CheckMounts(ms); sandbox.ClassOf(err) != sandbox.ClassInvalid {
			t.Errorf("CheckMounts(%v) = %v, want invalid", ms, err)
		}
	}
}

func TestRel(t *testing.T) {
	for in, want := range map[string]string{"/": ".", "": ".", "/a/b": "a/b", "a/../b": "b", "/../../etc": "etc", "//x//y/": "x/y"} {
		if got, err := rel(in); err != nil || got != want {
			t.Errorf("rel(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := rel("a\x00b"); err == nil {
		t.Error("rel accepts NUL")
	}
}
