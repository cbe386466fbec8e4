package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/testutil"
)

// workerPIDs returns the pid of each worker's latest start, from the
// supervisor's log.
func workerPIDs(d *daemon) map[int]int {
	re := regexp.MustCompile(`msg="worker started" worker=(\d+) pid=(\d+)`)
	out := map[int]int{}
	for _, m := range re.FindAllStringSubmatch(d.logs.String(), -1) {
		w, _ := strconv.Atoi(m[1])
		pid, _ := strconv.Atoi(m[2])
		out[w] = pid
	}
	return out
}

// alive reports whether pid runs (a zombie has exited).
func alive(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// "pid (comm) S ...": the state follows the last ')'.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z' && s[i+2] != 'X'
}

func waitWorkersGone(t *testing.T, pids map[int]int, what string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for w, pid := range pids {
		for alive(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("worker %d (pid %d) still runs %s", w, pid, what)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// roundTrips creates, execs in and deletes n sandboxes through d's one
// port, each request on a new connection (the kernel spreads connections
// over the workers), and returns the nodes that ran them.
func roundTrips(t *testing.T, d *daemon, rs *store.Redis, n int) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	c, err := client.New(d.url, client.WithAPIKey("k1"), client.WithHTTPClient(hc))
	if err != nil {
		t.Fatal(err)
	}
	nodes := map[string]int{}
	for i := 0; i < n; i++ {
		sb, err := c.Create(ctx, client.CreateRequest{Timeout: time.Minute})
		if err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
		rec, err := rs.Get(ctx, sandbox.ID(sb.ID))
		if err != nil {
			t.Fatalf("record of %s: %v", sb.ID, err)
		}
		nodes[rec.Node]++
		res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"echo", "round", strconv.Itoa(i)}})
		if err != nil || res.Stdout != fmt.Sprintf("round %d\n", i) {
			t.Fatalf("exec %d: %+v %v", i, res, err)
		}
		if err := c.Delete(ctx, sb.ID); err != nil {
			t.Fatalf("delete %d: %v", i, err)
		}
	}
	return nodes
}

// WORKERS=2 on one Redis: one port, two worker processes that are two
// replicas. Creates, execs and deletes through the port all succeed and
// land on both workers (forwarded when a request reaches the other one); a
// worker killed is restarted; SIGTERM stops every worker; a supervisor
// killed outright takes its workers with it. WORKERS=2 without Redis does
// not start, nor do workers whose Redis is unreachable.
func TestWorkers(t *testing.T) {
	testutil.RequireRoot(t)
	bin, agentBin := binaries(t)
	out, err := exec.Command(bin, "serve", "--set", "WORKERS=2", "--set", "AGENTBOX_DATA_DIR="+t.TempDir(), "--set", "AGENT_PATH="+agentBin).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "WORKERS=2 needs REDIS_ENABLED=true") {
		t.Fatalf("WORKERS=2 without Redis: %v\n%s", err, out)
	}

	// Workers that cannot start (their Redis unreachable): the supervisor
	// stops and fails, as a lone daemon would, instead of restarting them.
	{
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, "serve", "--set", "WORKERS=2", "--set", "REDIS_ENABLED=true", "--set", "REDIS_SERVER=127.0.0.1",
			"--set", fmt.Sprintf("REDIS_PORT=%d", freePort(t)), "--set", "AGENTBOX_DATA_DIR="+testutil.ShortTempDir(t), "--set", "NETWORK=off",
			"--set", fmt.Sprintf("PORT=%d", freePort(t)))
		cmd.Env = append(cleanEnv(), "AGENT_PATH="+agentBin)
		out, err := cmd.CombinedOutput()
		if err == nil || ctx.Err() != nil || !strings.Contains(string(out), "failed at start") {
			t.Fatalf("WORKERS=2 with Redis unreachable: %v\n%s", err, out)
		}
	}

	srv := testutil.StartRedis(t)
	rs, err := store.OpenRedis(context.Background(), store.RedisConfig{Addr: srv.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	settings := []string{"WORKERS=2", "NODE_ID=wk", "REDIS_ENABLED=true", "REDIS_SERVER=127.0.0.1", fmt.Sprintf("REDIS_PORT=%d", srv.Port),
		"API_KEYS=k1:alice,ko:ops", "TEMPLATE_ADMIN_USERS=ops", "NETWORK=off", "POOL_SIZE=0", "DEFAULT_DISK=64M"}
	d := startDaemon(t, settings...)
	waitNodes(t, d, 2)
	pids := workerPIDs(d)
	if len(pids) != 2 {
		t.Fatalf("worker pids from the log: %v", pids)
	}

	nodes := roundTrips(t, d, rs, 24)
	if nodes["wk-w0"] == 0 || nodes["wk-w1"] == 0 || len(nodes) != 2 {
		t.Fatalf("sandboxes per worker: %v", nodes)
	}
	for _, w := range []string{"w0", "w1"} {
		if !strings.Contains(d.logs.String(), "serving a forwarded request") {
			t.Fatalf("no request was forwarded between the workers (%s)", w)
		}
	}

	// A worker killed outright comes back (same node, same data dir) and
	// announces its new port.
	address := func() string {
		for _, n := range listNodes(t, d, "ko", http.StatusOK) {
			if n.ID == "wk-w1" {
				return n.Address
			}
		}
		return ""
	}
	before := address()
	if err := syscall.Kill(pids[1], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for workerPIDs(d)[1] == pids[1] {
		if time.Now().After(deadline) {
			t.Fatalf("worker 1 not restarted within a minute:\n%s", lastLines(d.logs.String(), 30))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(d.logs.String(), "worker exited; restarting it") {
		t.Fatal("the supervisor did not log the restart")
	}
	for a := address(); a == "" || a == before; a = address() {
		if time.Now().After(deadline) {
			t.Fatalf("the restarted worker 1 did not announce itself: %q", a)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The restarted worker serves again: both still take sandboxes.
	deadline = time.Now().Add(2 * time.Minute)
	for seen := map[string]int{}; seen["wk-w0"] == 0 || seen["wk-w1"] == 0; {
		for k, v := range roundTrips(t, d, rs, 4) {
			seen[k] += v
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the restart, sandboxes per worker: %v", seen)
		}
	}

	// SIGTERM: every worker stops, the supervisor exits.
	pids = workerPIDs(d)
	d.stop()
	if code := d.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("supervisor exit code %d", code)
	}
	waitWorkersGone(t, pids, "after SIGTERM")

	// SIGKILL of the supervisor: its workers go too (no orphans).
	d2 := startDaemon(t, settings...)
	waitNodes(t, d2, 2)
	pids = workerPIDs(d2)
	if len(pids) != 2 {
		t.Fatalf("worker pids from the log: %v", pids)
	}
	d2.kill()
	waitWorkersGone(t, pids, "after their supervisor was killed")
}

// TestWorkersBench measures (AGENTBOX_BENCH=1; numbers for
// docs/benchmarks.md) one daemon on Redis with WORKERS=1 (the reference)
// and WORKERS=2 on the same port: exec round trips (keep-alive, so on one
// worker, forwarded when the other runs the sandbox; and a new connection
// each, spread by the kernel) and cold creates per second, 4 at a time.
func TestWorkersBench(t *testing.T) {
	if os.Getenv("AGENTBOX_BENCH") == "" {
		t.Skip("a benchmark: set AGENTBOX_BENCH=1")
	}
	srv := testutil.StartRedis(t)
	for _, workers := range []int{1, 2, 1, 2} {
		d := startDaemon(t, fmt.Sprintf("WORKERS=%d", workers), "REDIS_ENABLED=true", "REDIS_SERVER=127.0.0.1", fmt.Sprintf("REDIS_PORT=%d", srv.Port),
			"API_KEYS=k1:alice", "NETWORK=off", "POOL_SIZE=0", "DEFAULT_DISK=64M", "MAX_SANDBOXES_PER_USER=100", fmt.Sprintf("REDIS_KEY_PREFIX=bench%d", workers))
		ctx := context.Background()
		keep := d.sdk(t, "k1")
		fresh, err := client.New(d.url, client.WithAPIKey("k1"), client.WithHTTPClient(&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}))
		if err != nil {
			t.Fatal(err)
		}
		sb, err := keep.Create(ctx, client.CreateRequest{Timeout: 10 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		const n = 300
		for _, c := range []struct {
			name string
			c    *client.Client
		}{{"keep-alive", keep}, {"new connection", fresh}} {
			lat := make([]time.Duration, 0, n)
			for i := 0; i < n; i++ {
				start := time.Now()
				if _, err := c.c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"true"}}); err != nil {
					t.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			t.Logf("WORKERS=%d exec round trip, %-14s p50 %.2f ms  p90 %.2f ms  p99 %.2f ms", workers, c.name,
				ms(lat[n/2]), ms(lat[n*9/10]), ms(lat[n*99/100]))
		}
		_ = keep.Delete(ctx, sb.ID)
		const creates, par = 48, 4
		var mu sync.Mutex
		var ids []string
		start := time.Now()
		var wg sync.WaitGroup
		sem := make(chan struct{}, par)
		for i := 0; i < creates; i++ {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				s, err := fresh.Create(ctx, client.CreateRequest{Timeout: 10 * time.Minute})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				ids = append(ids, s.ID)
				mu.Unlock()
			}()
		}
		wg.Wait()
		el := time.Since(start)
		t.Logf("WORKERS=%d cold creates: %d in %.2f s = %.1f/s", workers, len(ids), el.Seconds(), float64(len(ids))/el.Seconds())
		for _, id := range ids {
			_ = keep.Delete(ctx, id)
		}
		d.stop()
	}
}

// Workers with sandbox networking: each worker runs its own bridge on its
// own slice of NETWORK_SUBNET, and sandboxes of both reach the (test)
// internet by name through their worker's DNS filter.
func TestWorkersNetwork(t *testing.T) {
	inet := newTestInternet(t, map[string]string{"allowed.test": "198.18.77.1"})
	srv := testutil.StartRedis(t)
	rs, err := store.OpenRedis(context.Background(), store.RedisConfig{Addr: srv.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	suffix := inet.hostIf[len(inet.hostIf)-4:]
	d := startDaemon(t, "WORKERS=2", "NODE_ID=wn", "REDIS_ENABLED=true", "REDIS_SERVER=127.0.0.1", fmt.Sprintf("REDIS_PORT=%d", srv.Port),
		"API_KEYS=k1:alice,ko:ops", "TEMPLATE_ADMIN_USERS=ops", "POOL_SIZE=0", "DEFAULT_DISK=64M",
		"NETWORK=on", "NETWORK_BRIDGE=abxw"+suffix, "NETWORK_SUBNET=10.214.0.0/24", "NETWORK_DNS="+inet.addr)
	waitNodes(t, d, 2)
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	c, err := client.New(d.url, client.WithAPIKey("k1"), client.WithHTTPClient(hc))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// The /25 slices: worker 0 .0-.127, worker 1 .128-.255.
	low := map[string]int{"wn-w0": 0, "wn-w1": 128}
	done := map[string]bool{}
	for i := 0; i < 24 && len(done) < 2; i++ {
		sb, err := c.Create(ctx, client.CreateRequest{Timeout: 5 * time.Minute, Network: &client.Network{Mode: "egress"}})
		if err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
		rec, err := rs.Get(ctx, sandbox.ID(sb.ID))
		if err != nil {
			t.Fatal(err)
		}
		if !done[rec.Node] {
			if got := fetchInSandbox(t, d, "k1", sb.ID, "http://allowed.test/"); !strings.HasPrefix(got, "OK hello") {
				t.Fatalf("egress by name from a sandbox of %s: %s", rec.Node, got)
			}
			res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"/bin/sh", "-c", "cat /proc/net/fib_trie | grep -o '10\\.214\\.0\\.[0-9]*' | sort -u"}})
			if err != nil {
				t.Fatal(err)
			}
			addrs := strings.Fields(res.Stdout)
			if len(addrs) == 0 {
				t.Fatalf("a sandbox of %s has no address in 10.214.0.0/24", rec.Node)
			}
			for _, a := range addrs {
				n, _ := strconv.Atoi(strings.TrimPrefix(a, "10.214.0."))
				if lo := low[rec.Node]; n < lo || n > lo+127 {
					t.Fatalf("a sandbox of %s has address %s, outside its worker's slice", rec.Node, a)
				}
			}
			t.Logf("sandbox of %s: %q", rec.Node, strings.Fields(res.Stdout))
			done[rec.Node] = true
		}
		if err := c.Delete(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
	}
	if len(done) != 2 {
		t.Fatalf("sandboxes ran on %v only", done)
	}
}
