package native

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentbox/agentbox/internal/backend/backendtest"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/template/layer"
	"github.com/agentbox/agentbox/internal/testutil"
)

// TestSnapshotDiff: the layer of a root image sandbox's changes, unpacked
// as the store would and stacked on the template's layers, gives a new
// sandbox the files the first one had — owners in image ids — and none of
// its per-sandbox files; host sandboxes are refused.
func TestSnapshotDiff(t *testing.T) {
	testutil.RequireRoot(t)
	b := newTestBackend(t, testutil.ShortTempDir(t))
	ctx := ctxT(t)
	layers := imageLayers(t)
	tmpl := imageTemplate(layers, sandbox.ImageConfig{})
	src := backendtest.Create(t, b, sandbox.Spec{Template: tmpl, WritableRoot: true, Root: true})
	r := backendtest.Exec(t, backendtest.Client(t, src, ""), `set -e
		echo built > /etc/built; mkdir -p /opt/tool; echo v1 > /opt/tool/version
		rm /etc/image-only; rm -r /opt/data; mkdir /opt/data; echo fresh > /opt/data/only
		echo app > /opt/tool/owned; chown 1001:1001 /opt/tool/owned
		echo ws > /workspace/not-in-snapshot; echo ok`)
	if r.Stdout != "ok\n" {
		t.Fatalf("setup: %+v", r)
	}
	var tarball bytes.Buffer
	if err := b.SnapshotDiff(ctx, src.ID, &tarball); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	// The sandbox runs on after its freeze.
	if r := backendtest.Exec(t, backendtest.Client(t, src, ""), "cat /etc/built"); r.Stdout != "built\n" {
		t.Fatalf("sandbox after snapshot: %+v", r)
	}
	newLayer := filepath.Join(testutil.ShortTempDir(t), "snap")
	if err := os.Mkdir(newLayer, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := layer.Unpack(context.Background(), &tarball, newLayer, layer.Options{}); err != nil {
		t.Fatalf("unpack the snapshot layer: %v", err)
	}
	for _, p := range []string{".agentbox", "etc/hosts", "etc/hostname", "workspace/not-in-snapshot"} {
		if _, err := os.Lstat(filepath.Join(newLayer, p)); err == nil {
			t.Errorf("snapshot layer holds %s", p)
		}
	}
	snap := imageTemplate(append(append([]string(nil), layers...), newLayer), sandbox.ImageConfig{})
	dst := backendtest.Create(t, b, sandbox.Spec{Template: snap, WritableRoot: true})
	r = backendtest.Exec(t, backendtest.Client(t, dst, ""), `cat /etc/built /opt/tool/version; ls /opt/data; test -e /etc/image-only && echo still-there; ls -n /opt/tool/owned | while read m l u g rest; do echo "$u:$g"; done; ls /workspace`)
	if r.Stdout != "built\nv1\nonly\n1001:1001\n" {
		t.Fatalf("sandbox of the snapshot = %+v", r)
	}

	host := backendtest.Create(t, b, sandbox.Spec{Template: sandbox.HostTemplate()})
	if err := b.SnapshotDiff(ctx, host.ID, &bytes.Buffer{}); sandbox.ClassOf(err) != sandbox.ClassInvalid {
		t.Fatalf("host snapshot: %v, want invalid_argument", err)
	}
}
