package docker

import (
	"testing"

	"github.com/agentbox/agentbox/internal/sandbox"
)

func TestRemapBase(t *testing.T) {
	if n, err := remapBase("/var/lib/docker/100000.100000"); err != nil || n != 100000 {
		t.Fatalf("remapBase = %d, %v", n, err)
	}
	for _, bad := range []string{"/var/lib/docker", "/var/lib/docker/x.y", "/var/lib/docker/0.0", "/d/-5.-5"} {
		if _, err := remapBase(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestCheckMounts(t *testing.T) {
	ok := sandbox.Spec{WorkspaceDir: "/srv/ws", Mounts: []sandbox.Mount{{Source: "/srv/data", Target: "/data", ReadOnly: true}}}
	if err := checkMounts(ok); err != nil {
		t.Fatal(err)
	}
	for name, spec := range map[string]sandbox.Spec{
		"relative workspace": {WorkspaceDir: "ws"},
		"unclean workspace":  {WorkspaceDir: "/srv/../etc"},
		"relative source":    {Mounts: []sandbox.Mount{{Source: "data", Target: "/data"}}},
		"over the agent":     {Mounts: []sandbox.Mount{{Source: "/srv/x", Target: "/opt/agentbox"}}},
		"over the socket":    {Mounts: []sandbox.Mount{{Source: "/srv/x", Target: "/run"}}},
		"over the root":      {Mounts: []sandbox.Mount{{Source: "/srv/x", Target: "/"}}},
		"over the workspace": {Mounts: []sandbox.Mount{{Source: "/srv/x", Target: "/workspace"}}},
	} {
		if err := checkMounts(spec); sandbox.ClassOf(err) != sandbox.ClassInvalid {
			t.Errorf("%s: %v, want invalid_argument", name, err)
		}
	}
}
