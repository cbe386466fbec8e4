package native

import (
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/backend/backendtest"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/testutil"
)

// waitBound bounds every wait for a service in these tests (a bound, not
// an assertion: a healthy service is ready long before).
const waitBound = 60 * time.Second

// TestServiceWebApp: a web app started by the agent after boot serves
// HTTP as soon as its port check passes, and keeps serving after a stop
// and start of the sandbox (the service comes from the sandbox's record).
func TestServiceWebApp(t *testing.T) {
	testutil.RequireRoot(t)
	b := newTestBackend(t, testutil.ShortTempDir(t))
	svc, err := sandbox.ServiceOf(sandbox.ImageConfig{
		Cmd: []string{"python3", "-m", "http.server", "8000", "--bind", "127.0.0.1"}, Ports: []string{"8000/tcp"}})
	if err != nil || svc == nil || svc.Ready == nil || svc.Ready.Port != 8000 {
		t.Fatalf("ServiceOf = %+v, %v; want the CMD with a port check on 8000", svc, err)
	}
	info := backendtest.Create(t, b, sandbox.Spec{Template: sandbox.HostTemplate(), Service: svc})
	c := backendtest.Client(t, info, "")
	get := `python3 -c 'import urllib.request as u; print(u.urlopen("http://127.0.0.1:8000/").status)'`
	for round := range 2 {
		if _, err := c.WaitService(ctxT(t), waitBound); err != nil {
			t.Fatalf("round %d: service not ready: %v", round, err)
		}
		if r := backendtest.Exec(t, c, get); r.Stdout != "200\n" {
			t.Fatalf("round %d: GET right after ready = %+v", round, r)
		}
		if round == 0 {
			if err := b.Stop(ctxT(t), info.ID); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Start(ctxT(t), info.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The service is an ordinary, listed process of the sandbox.
	r := backendtest.Exec(t, c, `for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline; echo; done | grep -c '^python3 -m http.server'`)
	if r.Stdout != "1\n" {
		t.Fatalf("service processes = %q", r.Stdout)
	}
}

// TestServiceImageUser: the service runs as the image's USER, in its
// WORKDIR, with its ENV; its ready_cmd decides readiness; the definition
// is not visible to the sandbox's processes.
func TestServiceImageUser(t *testing.T) {
	testutil.RequireRoot(t)
	b := newTestBackend(t, testutil.ShortTempDir(t))
	cfg := sandbox.ImageConfig{User: "app", WorkingDir: "/srv/app", Env: []string{"IMG=image", "PATH=/usr/local/bin:/usr/bin:/bin"},
		Labels: map[string]string{
			sandbox.LabelStartCmd: `echo "$(id -u) $(pwd) $IMG" > /tmp/info; exec sleep 1000`,
			sandbox.LabelReadyCmd: `test -s /tmp/info`,
		}}
	svc, err := sandbox.ServiceOf(cfg)
	if err != nil {
		t.Fatal(err)
	}
	info := backendtest.Create(t, b, sandbox.Spec{Template: imageTemplate(imageLayers(t), cfg), WritableRoot: true, Service: svc})
	c := backendtest.Client(t, info, "")
	if _, err := c.WaitService(ctxT(t), waitBound); err != nil {
		t.Fatal(err)
	}
	r := backendtest.Exec(t, c, `cat /tmp/info; echo "svc=$AGENTBOX_SERVICE"; cat /proc/1/environ 2>&1 >/dev/null | grep -c denied`)
	if r.Stdout != "1001 /srv/app image\nsvc=\n1\n" {
		t.Fatalf("service saw %q (%s)", r.Stdout, r.Stderr)
	}
}

// TestServiceCrashLoop: a service that keeps exiting is restarted with
// backoff a bounded number of times, then failed, with its output and the
// restarts in its events.
func TestServiceCrashLoop(t *testing.T) {
	testutil.RequireRoot(t)
	b := newTestBackend(t, testutil.ShortTempDir(t))
	svc := &sandbox.Service{Cmd: []string{"sh", "-c", "echo crashing now; exit 3"}, Ready: &sandbox.ReadyCheck{Port: 9}, MaxRestarts: 2}
	info := backendtest.Create(t, b, sandbox.Spec{Template: sandbox.HostTemplate(), Service: svc})
	c := backendtest.Client(t, info, "")
	st, err := c.WaitService(ctxT(t), waitBound)
	if sandbox.ClassOf(err) != sandbox.ClassUnavailable || !strings.Contains(err.Error(), "exited 3 times") || !strings.Contains(err.Error(), "crashing now") {
		t.Fatalf("crash loop: %v, want failed with its output", err)
	}
	if st.Restarts != 2 || countEvents(st, "service restarted") != 2 || countEvents(st, "service exited") != 3 {
		t.Fatalf("status = %+v", st)
	}
}

// TestServiceNeverReady: the wait for a service that never gets ready
// ends at its bound with the service's last output; a healthcheck with
// retries fails it by itself.
func TestServiceNeverReady(t *testing.T) {
	testutil.RequireRoot(t)
	b := newTestBackend(t, testutil.ShortTempDir(t))
	svc := &sandbox.Service{Cmd: []string{"sh", "-c", "echo listening soon; exec sleep 1000"}, Ready: &sandbox.ReadyCheck{Port: 9}}
	info := backendtest.Create(t, b, sandbox.Spec{Template: sandbox.HostTemplate(), Service: svc})
	c := backendtest.Client(t, info, "")
	_, err := c.WaitService(ctxT(t), 2*time.Second)
	if sandbox.ClassOf(err) != sandbox.ClassTimeout || !strings.Contains(err.Error(), "listening soon") {
		t.Fatalf("never ready: %v, want a timeout with the output", err)
	}

	hc, err := sandbox.ServiceOf(sandbox.ImageConfig{Cmd: []string{"sleep", "1000"}, Healthcheck: &sandbox.Healthcheck{
		Test: []string{"CMD-SHELL", "echo not yet >&2; exit 1"}, Interval: 10 * time.Millisecond, Retries: 3}})
	if err != nil {
		t.Fatal(err)
	}
	info = backendtest.Create(t, b, sandbox.Spec{Template: sandbox.HostTemplate(), Service: hc})
	_, err = backendtest.Client(t, info, "").WaitService(ctxT(t), waitBound)
	if sandbox.ClassOf(err) != sandbox.ClassUnavailable || !strings.Contains(err.Error(), "failed 3 times") || !strings.Contains(err.Error(), "not yet") {
		t.Fatalf("unhealthy: %v", err)
	}
}

// TestServiceCodeContext: a code-interpreter template's default python
// context is running and warm before the first execution.
func TestServiceCodeContext(t *testing.T) {
	testutil.RequireRoot(t)
	b := newTestBackend(t, testutil.ShortTempDir(t))
	svc, err := sandbox.ServiceOf(sandbox.ImageConfig{Labels: map[string]string{
		sandbox.LabelCodeContext: "python", sandbox.LabelCodeWarmup: "import json; WARM = json.dumps([1])"}})
	if err != nil || svc == nil || len(svc.Cmd) != 0 {
		t.Fatalf("ServiceOf = %+v, %v", svc, err)
	}
	info := backendtest.Create(t, b, sandbox.Spec{Template: sandbox.HostTemplate(), Service: svc})
	c := backendtest.Client(t, info, "")
	if _, err := c.WaitService(ctxT(t), waitBound); err != nil {
		t.Fatal(err)
	}
	// The interpreter already runs: its process exists before any request
	// about contexts or code.
	r := backendtest.Exec(t, c, `for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline; echo; done | grep -c '^[^ ]*python3 -u -c'`)
	if r.Stdout != "1\n" {
		r = backendtest.Exec(t, c, `for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline | head -c 80; echo; done`)
		t.Fatalf("interpreters before the first cell: %q", r.Stdout)
	}
	ex, err := c.RunCode(ctxT(t), agentclient.ExecuteRequest{Code: "print(WARM)"})
	if err != nil || ex.Error != nil || strings.Join(ex.Stdout, "") != "[1]\n" {
		t.Fatalf("first cell = %+v, %v", ex, err)
	}
}

func countEvents(st sandbox.ServiceStatus, msg string) int {
	n := 0
	for _, ev := range st.Events {
		if ev.Message == msg {
			n++
		}
	}
	return n
}
