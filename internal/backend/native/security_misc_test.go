package native

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/backend/backendtest"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/testutil"
)

// TestSecurityHostInfoHidden: the kernel's configuration and command
// line, the host's block devices (and the disk images behind the loop
// devices) and the host path of the data dir are not visible inside a
// sandbox.
func TestSecurityHostInfoHidden(t *testing.T) {
	testutil.RequireRoot(t)
	dir := testutil.ShortTempDir(t)
	b := newTestBackend(t, dir)
	box := backendtest.Create(t, b, sandbox.Spec{Template: sandbox.HostTemplate()})
	c := backendtest.Client(t, box, "")
	rootfs := hostLikeRootfs(t)
	dirBox := backendtest.Create(t, b, sandbox.Spec{Template: dirTemplate(rootfs)})
	dirC := backendtest.Client(t, dirBox, "")

	for _, p := range []string{"/proc/config.gz", "/proc/cmdline"} {
		if _, err := os.Stat(p); err != nil {
			continue // this host has none to leak
		}
		if r := backendtest.Exec(t, c, "cat "+p+" 2>/dev/null | wc -c"); r.Stdout != "0\n" {
			t.Errorf("%s readable in the sandbox: %d bytes (%+v)", p, len(r.Stdout), r)
		}
	}
	for _, p := range []string{"/sys/block", "/sys/class/block", "/sys/dev/block", "/sys/devices/virtual/block"} {
		if r := backendtest.Exec(t, c, "ls -A "+p+" 2>/dev/null"); strings.TrimSpace(r.Stdout) != "" {
			t.Errorf("%s lists host block devices in the sandbox: %q", p, r.Stdout)
		}
	}
	// The host template, a dir: template (an overlay whose layers are
	// host directories) and a writable host root (an overlay on /usr).
	wrBox := backendtest.Create(t, b, sandbox.Spec{Template: sandbox.HostTemplate(), WritableRoot: true, Root: true})
	wrC := backendtest.Client(t, wrBox, "")
	if r := backendtest.Exec(t, wrC, "touch /usr/agentbox-writable && echo ok"); r.Stdout != "ok\n" {
		t.Fatalf("writable root: %+v", r)
	}
	for _, c := range []*agentclient.Client{c, dirC, wrC} {
		r := backendtest.Exec(t, c, "cat /proc/self/mountinfo")
		if r.Exit.ExitCode != 0 || r.Stdout == "" {
			t.Fatalf("read mountinfo: %+v", r)
		}
		for _, line := range strings.Split(r.Stdout, "\n") {
			if strings.Contains(line, dir) || strings.Contains(line, rootfs) {
				t.Errorf("mountinfo shows the data dir %s or the template %s: %s", dir, rootfs, line)
			}
		}
	}
}

// TestSecurityHostEtcCredentials: host configuration that may hold
// credentials (package manager registries, proxy settings, git URL
// rewrites) is not copied into sandboxes.
func TestSecurityHostEtcCredentials(t *testing.T) {
	testutil.RequireRoot(t)
	src := t.TempDir()
	for _, name := range hostEtcAllowlist {
		if _, err := os.Lstat(filepath.Join("/etc", name)); err == nil {
			if err := copyTreeWorldReadable(filepath.Join("/etc", name), filepath.Join(src, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	const token = "agentbox-test-secret-token"
	for name, content := range map[string]string{
		"npmrc":    "//registry.npmjs.org/:_authToken=" + token + "\n",
		"pip.conf": "[global]\nindex-url = https://user:" + token + "@pypi.example/simple\n",
		// Proxy credentials and git credential helpers live here too.
		"environment": "https_proxy=http://user:" + token + "@proxy.example:3128\n",
		"gitconfig":   "[url \"https://x-access-token:" + token + "@git.example/\"]\n\tinsteadOf = https://git.example/\n",
	} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old := hostEtcSource
	hostEtcSource = src
	t.Cleanup(func() { hostEtcSource = old })

	b := newTestBackend(t, testutil.ShortTempDir(t))
	box := backendtest.Create(t, b, sandbox.Spec{Template: sandbox.HostTemplate()})
	c := backendtest.Client(t, box, "")
	r := backendtest.Exec(t, c, "cat /etc/npmrc /etc/pip.conf /etc/environment /etc/gitconfig 2>&1; cat /etc/os-release | head -1")
	if strings.Contains(r.Stdout, token) {
		t.Fatalf("host credentials visible in the sandbox: %q", r.Stdout)
	}
	if !strings.Contains(r.Stdout, "No such file") {
		t.Errorf("npmrc/pip.conf present in the sandbox: %q", r.Stdout)
	}
}
