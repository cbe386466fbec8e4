package e2b

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/template"
	"github.com/agentbox/agentbox/internal/volume"
)

// TestVolumeTokens: a volume token opens its own volume of its own owner
// only; a tampered, truncated or re-targeted one, or one of a server with
// another key, is refused with one error.
func TestVolumeTokens(t *testing.T) {
	s := &Server{volumeKey: []byte("0123456789abcdef0123456789abcdef")}
	tok := s.volumeToken("alice", "vol-1")
	if owner, err := s.volumeOwner(tok, "vol-1"); err != nil || owner != "alice" {
		t.Fatalf("own token: %q %v", owner, err)
	}
	other := &Server{volumeKey: []byte("another key of thirty-two bytes!")}
	forged := strings.Replace(tok, "YWxpY2U", "Ym9i", 1) // base64url("alice") -> "bob"
	for name, bad := range map[string]struct{ tok, id string }{
		"another volume":     {tok, "vol-2"},
		"another owner":      {forged, "vol-1"},
		"tampered mac":       {tok[:len(tok)-1] + "A", "vol-1"},
		"no prefix":          {strings.TrimPrefix(tok, volumeTokenPrefix), "vol-1"},
		"truncated":          {tok[:len(tok)/2], "vol-1"},
		"another server key": {other.volumeToken("alice", "vol-1"), "vol-1"},
		"an API key":         {"e2b_0a1b2c3d", "vol-1"},
	} {
		if _, err := s.volumeOwner(bad.tok, bad.id); sandbox.ClassOf(err) != sandbox.ClassUnauth {
			t.Errorf("%s: %v, want unauthenticated", name, err)
		}
	}
}

func TestVolumeEntryAndSnapshotJSON(t *testing.T) {
	mt := time.Unix(1700000000, 0).UTC()
	for in, want := range map[string]string{"file": "file", "dir": "directory", "symlink": "symlink", "other": "unknown"} {
		e := entryJSON(volume.Entry{Name: "x", Path: "/x", Type: in, Mode: 0o644, UID: 1000, ModTime: mt})
		if e.Type != want || !e.Atime.Equal(mt) || !e.Ctime.Equal(mt) || e.UID != 1000 {
			t.Errorf("%s: %+v", in, e)
		}
	}
	info := template.Info{Name: "private/u1/snap", Tag: "latest", Source: "snapshot of sb-1",
		Layers: []template.LayerInfo{{Size: 1000}, {Size: 200}, {Size: 30}}}
	got := snapshotJSON(info)
	if got.SnapshotID != "private/u1/snap:latest" || got.SandboxID != "sb-1" || got.SizeBytes != 30 || got.SharedBytes != 1200 || got.Layers != 3 ||
		len(got.Names) != 1 || got.Names[0] != got.SnapshotID {
		t.Errorf("snapshotJSON: %+v", got)
	}
	s := &Server{cfg: Config{TemplateAdmins: []string{"root"}}}
	if !s.isSnapshotOf(template.Info{Name: template.PrivateName("alice", "s"), Source: "snapshot of x"}, "alice") ||
		s.isSnapshotOf(template.Info{Name: template.PrivateName("alice", "s"), Source: "snapshot of x"}, "bob") ||
		s.isSnapshotOf(template.Info{Name: "shared", Source: "snapshot of x"}, "alice") ||
		!s.isSnapshotOf(template.Info{Name: "shared", Source: "snapshot of x"}, "root") ||
		s.isSnapshotOf(template.Info{Name: template.PrivateName("alice", "b"), Source: "build"}, "alice") {
		t.Error("isSnapshotOf: a tenant lists its own snapshots, an admin the shared ones too, no one another's")
	}
	if !isVolumeMakeDir(httptest.NewRequest("POST", "/volumecontent/v/dir?path=/a", nil)) ||
		isVolumeMakeDir(httptest.NewRequest("POST", "/volumes", nil)) || isVolumeMakeDir(httptest.NewRequest("GET", "/volumecontent/v/dir", nil)) {
		t.Error("isVolumeMakeDir")
	}
}
