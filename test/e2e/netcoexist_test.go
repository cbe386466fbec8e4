package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/testutil"
)

var networkReadyLine = regexp.MustCompile(`msg="sandbox network ready".* bridge=(\S+) subnet=(\S+)`)

// networkOf returns the bridge and subnet the daemon's start log names.
func networkOf(t *testing.T, d *daemon) (bridge, subnet string) {
	t.Helper()
	m := networkReadyLine.FindStringSubmatch(d.logs.String())
	if m == nil {
		t.Fatalf("no \"sandbox network ready\" line with its bridge in the start log:\n%s", lastLines(d.logs.String(), 40))
	}
	return m[1], m[2]
}

// assertBridgeGone checks that nothing of a daemon's bridge is left.
func assertBridgeGone(t *testing.T, bridge string) {
	t.Helper()
	if err := exec.Command("ip", "link", "show", bridge).Run(); err == nil {
		t.Errorf("bridge %s left behind", bridge)
	}
	if out, _ := exec.Command("nft", "list", "tables").Output(); strings.Contains(string(out), "inet "+bridge+"\n") {
		t.Errorf("nftables table %s left behind", bridge)
	}
	if _, err := os.Stat("/run/agentbox/net/" + bridge + ".claim"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("claim of %s left behind (%v)", bridge, err)
	}
	// Gone, or empty (an older daemon on that name may have left the
	// directory bind-mounted on itself).
	if entries, err := os.ReadDir("/run/agentbox/netns/" + bridge); len(entries) > 0 {
		t.Errorf("namespaces left in /run/agentbox/netns/%s: %v (%v)", bridge, entries, err)
	}
}

// Two daemons started on one host with defaults (NETWORK_BRIDGE and
// NETWORK_SUBNET unset) pick different bridges and subnets, and both give
// their sandboxes working egress, on the native API and E2B's. One
// configured with the other's bridge refuses to start (NETWORK=on) or starts
// with loopback only saying why (NETWORK=auto). Each stops removing only
// its own network.
func TestTwoDaemonsDefaultNetwork(t *testing.T) {
	testutil.RequireRoot(t)
	inet := newTestInternet(t, map[string]string{"allowed.test": "198.18.77.1"})
	const key = "net-key"
	settings := []string{"NETWORK_DNS=" + inet.addr, "BEARER_TOKEN=" + key}
	d1 := startDaemon(t, append([]string{"NETWORK=on"}, settings...)...)
	d2 := startDaemon(t, settings...) // NETWORK=auto, the default
	b1, s1 := networkOf(t, d1)
	b2, s2 := networkOf(t, d2)
	t.Logf("daemon 1: %s %s; daemon 2: %s %s", b1, s1, b2, s2)
	if b1 == b2 || s1 == s2 {
		t.Fatalf("both daemons on %s %s / %s %s", b1, s1, b2, s2)
	}

	for _, d := range []*daemon{d1, d2} {
		id := createRaw(t, d, key, map[string]any{"network": map[string]any{"mode": "egress"}})
		if got := fetchInSandbox(t, d, key, id, "http://allowed.test/"); !strings.HasPrefix(got, "OK hello") {
			t.Fatalf("egress from a sandbox of the daemon on %s: %s", networkReadyLine.FindString(d.logs.String()), got)
		}
		// What E2B clients do: a sandbox with internet access.
		status, data := d.call(t, "POST", "/sandboxes", "", map[string]any{"templateID": "host", "allow_internet_access": true, "timeout": 120}, "X-API-Key", key)
		if status != 201 {
			t.Fatalf("E2B create with internet access: %d %s", status, data)
		}
		sbID, _ := mustJSON(t, data)["sandboxID"].(string)
		if got := fetchInSandbox(t, d, key, sbID, "http://allowed.test/"); !strings.HasPrefix(got, "OK hello") {
			t.Fatalf("egress from an E2B sandbox: %s", got)
		}
		d.call(t, "DELETE", "/sandboxes/"+sbID, "", nil, "X-API-Key", key)
	}

	// Configured with a bridge another daemon holds: NETWORK=on refuses to
	// start and says what holds it and what to set instead.
	bin, agentBin := binaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "serve")
	cmd.Env = append(cleanEnv(), "AGENT_PATH="+agentBin, "HOST=127.0.0.1", fmt.Sprintf("PORT=%d", freePort(t)),
		"AGENTBOX_DATA_DIR="+testutil.ShortTempDir(t), "NETWORK=on", "NETWORK_BRIDGE="+b1, "NETWORK_DNS="+inet.addr)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "NETWORK_BRIDGE="+b1+" is taken") ||
		!strings.Contains(string(out), "running agentbox daemon with network state "+d1.dataDir+"/net") ||
		!strings.Contains(string(out), "set NETWORK_BRIDGE to a free name") {
		t.Fatalf("NETWORK=on with another daemon's bridge: %v\n%s", err, lastLines(string(out), 20))
	}
	// NETWORK=auto starts with loopback only and one line saying why.
	d3 := startDaemon(t, "NETWORK_SUBNET="+s2, "NETWORK_DNS="+inet.addr, "BEARER_TOKEN="+key)
	if !strings.Contains(d3.logs.String(), "sandbox networking unavailable") || !strings.Contains(d3.logs.String(), "NETWORK_SUBNET="+s2+" is taken") {
		t.Fatalf("NETWORK=auto with another daemon's subnet: no reason logged:\n%s", lastLines(d3.logs.String(), 40))
	}
	status, data := d3.call(t, "POST", "/v1/sandboxes", key, map[string]any{"network": map[string]any{"mode": "egress"}})
	if status != 400 || !strings.Contains(string(data), "egress networking is not available") {
		t.Fatalf("egress create on a daemon without networking: %d %s", status, data)
	}
	d3.stop()

	// Each stops removing its own network only; the other keeps working.
	d1.stop()
	assertBridgeGone(t, b1)
	id := createRaw(t, d2, key, map[string]any{"network": map[string]any{"mode": "egress"}})
	if got := fetchInSandbox(t, d2, key, id, "http://allowed.test/"); !strings.HasPrefix(got, "OK hello") {
		t.Fatalf("egress of the second daemon after the first stopped: %s", got)
	}
	d2.stop()
	assertBridgeGone(t, b2)
}

// A daemon with default network settings and AUTO_CLEANUP=false gets its
// bridge back when it restarts, and its egress sandbox keeps its network
// and policy; once no sandbox network is left, stopping leaves nothing.
func TestDefaultNetworkRestartKeepsBridge(t *testing.T) {
	testutil.RequireRoot(t)
	inet := newTestInternet(t, map[string]string{"allowed.test": "198.18.77.1", "other.test": "198.18.77.3"})
	const key = "net-key"
	d := startDaemon(t, "AUTO_CLEANUP=false", "NETWORK=on", "NETWORK_DNS="+inet.addr, "BEARER_TOKEN="+key)
	bridge, subnet := networkOf(t, d)
	id := createRaw(t, d, key, map[string]any{"network": map[string]any{"mode": "egress", "allow_out": []string{"allowed.test"}}})
	if got := fetchInSandbox(t, d, key, id, "http://allowed.test/"); !strings.HasPrefix(got, "OK hello") {
		t.Fatalf("egress before the restart: %s", got)
	}
	for _, how := range []string{"SIGTERM", "SIGKILL"} {
		if how == "SIGKILL" {
			d.kill()
		} else {
			d.stop()
		}
		d.start()
		b, s := networkOf(t, d)
		if b != bridge || s != subnet || !strings.Contains(d.logs.String(), `picked="kept from the last start"`) {
			t.Fatalf("after %s the daemon is on %s %s, want %s %s:\n%s", how, b, s, bridge, subnet, lastLines(d.logs.String(), 30))
		}
		if got := fetchInSandbox(t, d, key, id, "http://allowed.test/"); !strings.HasPrefix(got, "OK hello") {
			t.Fatalf("egress after %s: %s", how, got)
		}
		if got := fetchInSandbox(t, d, key, id, "http://other.test/"); !strings.HasPrefix(got, "ERR") {
			t.Fatalf("the sandbox's policy was lost after %s: %s", how, got)
		}
	}
	if status, data := d.call(t, "DELETE", "/v1/sandboxes/"+id, key, nil); status != 204 && status != 200 {
		t.Fatalf("delete: %d %s", status, data)
	}
	d.stop()
	assertBridgeGone(t, bridge)
}
