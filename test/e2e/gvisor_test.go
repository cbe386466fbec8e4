package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/testutil"
)

// TestGVisorSandbox creates a gVisor sandbox through the API and uses it:
// /v1/info lists the level, the sandbox reports it, exec and Python run on
// gVisor's kernel (uname), what the level lacks is refused with 503, a bad
// level with 400; a user whose minimum is gvisor gets it by default and is
// refused the container level with 403.
func TestGVisorSandbox(t *testing.T) {
	runsc := testutil.Runsc(t)
	d := startDaemon(t, "RUNSC_PATH="+runsc, "API_KEYS=ka:alice,kb:bob", `ISOLATION_BY_USER={"bob":"gvisor"}`)

	status, data := d.call(t, "GET", "/v1/info", "ka", nil)
	iso, _ := mustJSON(t, data)["isolation"].(map[string]any)
	levels, _ := iso["levels"].([]any)
	if status != 200 || !slices.Contains(levels, any("gvisor")) || iso["default"] != "container" {
		t.Fatalf("/v1/info isolation: %d %s", status, data)
	}
	if _, data := d.call(t, "GET", "/v1/info", "kb", nil); mustJSON(t, data)["isolation"].(map[string]any)["default"] != "gvisor" {
		t.Errorf("/v1/info for a user whose minimum is gvisor: %s", data)
	}

	id := createRaw(t, d, "ka", map[string]any{"template": "host", "isolation": "gvisor"})
	status, data = d.call(t, "GET", "/v1/sandboxes/"+id, "ka", nil)
	if status != 200 || mustJSON(t, data)["isolation"] != "gvisor" {
		t.Fatalf("get gvisor sandbox: %d %s", status, data)
	}
	status, data = d.call(t, "POST", "/v1/sandboxes/"+id+"/exec", "ka",
		map[string]any{"cmd": []string{"/bin/sh", "-c", "uname -r; python3 -c 'print(1)'; id -u"}}, "Accept", "application/json")
	m := mustJSON(t, data)
	out, _ := m["stdout"].(string)
	if status != 200 || m["exit_code"] != float64(0) || !strings.Contains(out, "gvisor") || !strings.HasSuffix(out, "\n1\n1000\n") {
		t.Fatalf("exec in a gVisor sandbox: %d %s", status, data)
	}
	// A file written through the API reads back through exec.
	if status, data := d.call(t, "PUT", "/v1/sandboxes/"+id+"/files?path=/workspace/note.txt", "ka", "from the API"); status/100 != 2 {
		t.Fatalf("write file: %d %s", status, data)
	}
	_, data = d.call(t, "POST", "/v1/sandboxes/"+id+"/exec", "ka", map[string]any{"cmd": []string{"cat", "/workspace/note.txt"}}, "Accept", "application/json")
	if mustJSON(t, data)["stdout"] != "from the API" {
		t.Errorf("file written through the API: %s", data)
	}
	// Code contexts keep their state through the same agent.
	mustRun(t, d, "ka", id, map[string]any{"code": "x = [1, 2]"})
	if x := mustRun(t, d, "ka", id, map[string]any{"code": "x.append(3)\nprint(x)\nlen(x)"}); x.stdout != "[1, 2, 3]\n" || x.text() != "3" {
		t.Errorf("code context in a gVisor sandbox: %+v", x)
	}
	// A terminal: real bytes in and out of a PTY of gVisor's kernel.
	gvisorPTY(t, d.sdk(t, "ka"), id)
	if status, data := d.call(t, "POST", "/v1/sandboxes/"+id+"/pause", "ka", "", "Content-Type", "application/json"); status != http.StatusServiceUnavailable {
		t.Errorf("pause of a gVisor sandbox: %d %s, want 503", status, data)
	}
	if status, data := d.call(t, "POST", "/v1/sandboxes", "ka", map[string]any{"template": "host", "isolation": "vm"}); status != http.StatusBadRequest {
		t.Errorf("create at an unknown level: %d %s, want 400", status, data)
	}

	// The Go SDK asks for the level too.
	sdk := d.sdk(t, "ka")
	sb, err := sdk.Create(context.Background(), client.CreateRequest{Template: "host", Isolation: "gvisor"})
	if err != nil || sb.Isolation != "gvisor" {
		t.Fatalf("SDK create at gvisor: %+v %v", sb, err)
	}
	if err := sdk.Delete(context.Background(), sb.ID); err != nil {
		t.Errorf("SDK delete: %v", err)
	}

	// bob's minimum is gvisor.
	bobs := createRaw(t, d, "kb", map[string]any{"template": "host"})
	if _, data := d.call(t, "GET", "/v1/sandboxes/"+bobs, "kb", nil); mustJSON(t, data)["isolation"] != "gvisor" {
		t.Errorf("bob's sandbox naming no level: %s, want gvisor", data)
	}
	if status, data := d.call(t, "POST", "/v1/sandboxes", "kb", map[string]any{"template": "host", "isolation": "container"}); status != http.StatusForbidden {
		t.Errorf("bob asking for the container level: %d %s, want 403", status, data)
	}
	for _, s := range []struct{ id, key string }{{id, "ka"}, {bobs, "kb"}} {
		if status, data := d.call(t, "DELETE", "/v1/sandboxes/"+s.id, s.key, nil); status/100 != 2 {
			t.Errorf("delete: %d %s", status, data)
		}
	}
}

// TestGVisorEgressPolicy: a gVisor sandbox's network goes through the same
// network namespace and egress policy as a container's: gVisor's network
// stack sends its packets out of the namespace's veth, where the policy
// holds. Loopback only in mode none; by name and denied CIDRs, the
// metadata address and the host's own ports in mode egress; an allow list.
func TestGVisorEgressPolicy(t *testing.T) {
	runsc := testutil.Runsc(t)
	inet := newTestInternet(t, map[string]string{"allowed.test": "198.18.77.1", "other.test": "198.18.77.3"})
	// A subnet of its own: the container level's network test uses another.
	d := networkDaemon(t, inet, "RUNSC_PATH="+runsc, "NETWORK_SUBNET=10.151.0.0/16", "DEFAULT_ISOLATION=gvisor")
	const key = "net-key"

	none := createRaw(t, d, key, map[string]any{})
	if _, data := d.call(t, "GET", "/v1/sandboxes/"+none, key, nil); mustJSON(t, data)["isolation"] != "gvisor" {
		t.Fatalf("DEFAULT_ISOLATION=gvisor: %s", data)
	}
	if got := fetchInSandbox(t, d, key, none, "http://198.18.77.1/"); !strings.HasPrefix(got, "ERR") {
		t.Fatalf("none mode reached the test host: %s", got)
	}
	open := createRaw(t, d, key, map[string]any{"network": map[string]any{"mode": "egress", "deny_out": []string{"198.18.77.3/32"}}})
	if got := fetchInSandbox(t, d, key, open, "http://allowed.test/"); !strings.HasPrefix(got, "OK hello") {
		t.Fatalf("egress by name from a gVisor sandbox: %s", got)
	}
	if got := fetchInSandbox(t, d, key, open, "http://198.18.77.3/"); !strings.HasPrefix(got, "ERR") {
		t.Fatalf("denied CIDR reachable from a gVisor sandbox: %s", got)
	}
	for _, target := range []string{"http://169.254.169.254/", "http://10.0.0.1/"} {
		if got := fetchInSandbox(t, d, key, open, target); !strings.HasPrefix(got, "ERR") {
			t.Errorf("%s reachable by default from a gVisor sandbox: %s", target, got)
		}
	}
	hostPort := freePort(t)
	srv := &http.Server{Addr: fmt.Sprintf("0.0.0.0:%d", hostPort), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "host secret")
	})}
	go srv.ListenAndServe()
	defer srv.Close()
	for _, hostAddr := range []string{testLANHost, "10.151.0.1"} {
		if got := fetchInSandbox(t, d, key, open, fmt.Sprintf("http://%s:%d/", hostAddr, hostPort)); !strings.HasPrefix(got, "ERR") {
			t.Errorf("host port reachable at %s from a gVisor sandbox: %s", hostAddr, got)
		}
	}
	strict := createRaw(t, d, key, map[string]any{"network": map[string]any{"mode": "egress", "allow_out": []string{"allowed.test"}}})
	if got := fetchInSandbox(t, d, key, strict, "http://allowed.test/"); !strings.HasPrefix(got, "OK") {
		t.Fatalf("allowed name: %s", got)
	}
	if got := fetchInSandbox(t, d, key, strict, "http://other.test/"); !strings.HasPrefix(got, "ERR") {
		t.Fatalf("name outside the allow list: %s", got)
	}
}

// gvisorPTY opens a PTY in gVisor sandbox id, resizes it, types a line
// into the shell and reads the answer back: the terminal's size, gVisor's
// kernel release, that stdin is a terminal, and the exit code.
func gvisorPTY(t *testing.T, sdk *client.Client, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pty, err := sdk.PTY(ctx, id, client.PTYOptions{Cols: 100, Rows: 30})
	if err != nil {
		t.Fatalf("PTY in a gVisor sandbox: %v", err)
	}
	defer pty.Close()
	if err := pty.Resize(132, 43); err != nil {
		t.Fatal(err)
	}
	if _, err := pty.Write([]byte("stty size; test -t 0 && echo tty-$((1+1)); cat /proc/sys/kernel/osrelease; echo marker-$((40+2)); exit 7\n")); err != nil {
		t.Fatal(err)
	}
	out := readUntil(pty, "marker-42")
	code, err := pty.Wait()
	if err != nil || code != 7 {
		t.Fatalf("PTY exit = %d %v; output %q", code, err, out.String())
	}
	for _, want := range []string{"43 132", "tty-2", "gvisor", "marker-42"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("PTY output lacks %q: %q", want, out.String())
		}
	}
}
