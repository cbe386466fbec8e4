package native

import (
	"testing"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// Extra mounts may go under an image's own /etc and /usr (a build step's
// secret at /etc/apt/...), never over the per-sandbox /etc files, the
// kernel file systems or the agent; under host and dir templates /etc and
// /usr stay reserved.
func TestMountTargetsReservedByKind(t *testing.T) {
	src := t.TempDir()
	cases := []struct {
		kind, target string
		ok           bool
	}{
		{sandbox.TemplateImage, "/etc/apt/auth.conf.d/x.conf", true},
		{sandbox.TemplateImage, "/usr/local/cache", true},
		{sandbox.TemplateImage, "/etc/resolv.conf", false},
		{sandbox.TemplateImage, "/etc/hosts", false},
		{sandbox.TemplateImage, "/proc/x", false},
		{sandbox.TemplateImage, "/.agentbox/agent", false},
		{sandbox.TemplateImage, "/", false},
		{sandbox.TemplateHost, "/etc/apt/x", false},
		{sandbox.TemplateHost, "/usr/x", false},
		{sandbox.TemplateDir, "/etc/x", false},
		{sandbox.TemplateHost, "/data", true},
	}
	for _, c := range cases {
		spec := sandbox.Spec{Template: sandbox.Template{Kind: c.kind}, Mounts: []sandbox.Mount{{Source: src, Target: c.target}}}
		if err := validateMounts(spec); (err == nil) != c.ok {
			t.Errorf("%s template, mount at %s: err %v, want ok=%v", c.kind, c.target, err, c.ok)
		}
	}
}
