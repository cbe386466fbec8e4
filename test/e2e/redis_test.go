package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/testutil"
)

// A daemon on Redis (REDIS_ENABLED): sandboxes live in Redis with their
// owner and node; a second replica on the same Redis neither drops nor
// shows them; /v1/nodes lists both to the operator; with Redis down,
// requests that need state fail fast with 503 while running sandboxes keep
// working, and everything resumes when Redis is back; a restarted daemon
// killed with SIGKILL finds its sandboxes and sessions in Redis.
func TestRedisDaemon(t *testing.T) {
	srv := testutil.StartRedis(t)
	settings := []string{"REDIS_ENABLED=true", "REDIS_SERVER=127.0.0.1", fmt.Sprintf("REDIS_PORT=%d", srv.Port),
		"REDIS_TIMEOUT=1", "API_KEYS=k1:alice,ko:ops", "TEMPLATE_ADMIN_USERS=ops", "AUTO_CLEANUP=false", "POOL_SIZE=1"}
	d := startDaemon(t, append(settings, "NODE_ID=replica-a")...)
	ctx := context.Background()
	// The last start of the daemon cleans up (its pooled sandbox included).
	t.Cleanup(func() {
		d.env = append(d.env, "AUTO_CLEANUP=true")
		d.stop()
		d.start()
	})
	rs, err := store.OpenRedis(ctx, store.RedisConfig{Addr: srv.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()

	c := d.sdk(t, "k1")
	var created []string
	// AUTO_CLEANUP is off (for the restart): a failing test must still
	// destroy its sandboxes (runs before the daemon's stop).
	t.Cleanup(func() {
		for _, id := range created {
			_ = d.sdk(t, "k1").Delete(context.Background(), id)
		}
	})
	sb, err := c.Create(ctx, client.CreateRequest{Metadata: map[string]string{"keep": "me"}})
	if err != nil {
		t.Fatal(err)
	}
	created = append(created, sb.ID)
	if _, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"/bin/sh", "-c", "echo state > /workspace/f"}}); err != nil {
		t.Fatal(err)
	}
	rec, err := rs.Get(ctx, sandbox.ID(sb.ID))
	if err != nil || rec.Owner != "alice" || rec.Node != "replica-a" || rec.AccessToken != sb.AccessToken || rec.Metadata["keep"] != "me" {
		t.Fatalf("record in Redis: %+v %v", rec, err)
	}

	// A second replica on the same Redis starts, recovers only its own
	// (none) and leaves replica-a's record alone.
	d2 := startDaemon(t, append(settings, "NODE_ID=replica-b", "POOL_SIZE=0")...)
	if _, err := rs.Get(ctx, sandbox.ID(sb.ID)); err != nil {
		t.Fatalf("replica-b's start dropped replica-a's record: %v", err)
	}
	// Each replica lists both; its own entry is current (the other's is as
	// of its last heartbeat).
	for _, r := range []*daemon{d, d2} {
		nodes := listNodes(t, r, "ko", http.StatusOK)
		if len(nodes) != 2 || nodes[0].ID != "replica-a" || nodes[1].ID != "replica-b" ||
			nodes[0].Address != d.url || nodes[1].Address != d2.url || nodes[0].Backends[0] != "native" {
			t.Fatalf("nodes: %+v", nodes)
		}
		if r == d && (nodes[0].Sandboxes != 1+nodes[0].Pooled || nodes[0].MemoryBytes <= 0) {
			t.Fatalf("replica-a's load: %+v", nodes[0])
		}
	}
	// Wait (bounded) for replica-a's warm pool, then check its member is in
	// Redis.
	pooled := waitPooled(t, d, 1)
	if ids, err := rs.PoolMembers(ctx, "replica-a", "host"); err != nil || len(ids) != 1 {
		t.Fatalf("pool membership in Redis: %v %v (node says %d pooled)", ids, err, pooled)
	}
	listNodes(t, d, "k1", http.StatusForbidden)
	if _, err := d.sdk(t, "k1").Nodes(ctx); !client.IsPermissionDenied(err) {
		t.Fatalf("SDK nodes as a tenant: %v", err)
	}
	d2.stop()
	// A clean stop leaves the registry at once (listed with the Go SDK).
	if nodes, err := d.sdk(t, "ko").Nodes(ctx); err != nil || len(nodes) != 1 || nodes[0].ID != "replica-a" || nodes[0].Sandboxes < 1 {
		t.Fatalf("nodes after replica-b stopped: %+v %v", nodes, err)
	}

	poolIDs, _ := rs.PoolMembers(ctx, "replica-a", "host")

	// Redis down, under a few concurrent creates: each fails with 503
	// (class unavailable) before touching a sandbox; the pooled one is not
	// handed out or destroyed.
	srv.Stop()
	var wg sync.WaitGroup
	codes := make(chan string, 6)
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, body := d.call(t, "POST", "/v1/sandboxes", "k1", map[string]any{})
			var e struct{ Code string }
			_ = json.Unmarshal(body, &e)
			codes <- fmt.Sprintf("%d %s", code, e.Code)
		}()
	}
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != "503 unavailable" {
			t.Fatalf("create with Redis down: %s", c)
		}
	}
	if n := sandboxProcesses(t, string(poolIDs[0])); n == 0 {
		t.Fatal("the pooled sandbox died while Redis was down")
	}
	assertNoSandboxesBut(t, d, c, sb.ID)
	code, body := d.call(t, "GET", "/v1/nodes", "ko", nil)
	if code != http.StatusServiceUnavailable {
		t.Fatalf("nodes with Redis down: %d %s", code, body)
	}
	// Delete and extend need state: 503, and nothing changed.
	before, err := c.Get(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, sb.ID); !client.IsUnavailable(err) {
		t.Fatalf("delete with Redis down: %v", err)
	}
	if _, err := c.Refresh(ctx, sb.ID, time.Hour); !client.IsUnavailable(err) {
		t.Fatalf("refresh with Redis down: %v", err)
	}
	if after, err := c.Get(ctx, sb.ID); err != nil || !after.EndAt.Equal(before.EndAt) {
		t.Fatalf("after refused refresh: %+v %v (end was %s)", after, err, before.EndAt)
	}
	// The running sandbox is unharmed: exec and file reads need no state.
	res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"cat", "/workspace/f"}})
	if err != nil || res.Stdout != "state\n" {
		t.Fatalf("exec with Redis down: %+v %v", res, err)
	}
	// So is an agentscope tool call on it (its records are in Redis too).
	status, tool := asCall(t, d, "call_tool", "k1", map[string]any{"identity": sb.ID, "tool_name": "run_shell_command",
		"arguments": map[string]any{"command": "cat /workspace/f"}})
	if data, _ := tool["data"].(map[string]any); status != http.StatusOK || !strings.Contains(fmt.Sprint(data["content"]), "state") {
		t.Fatalf("agentscope call_tool with Redis down: %d %v", status, tool)
	}

	// Redis back: creates work again (the client redials within seconds).
	srv.Start()
	var sb2 *client.Sandbox
	deadline := time.Now().Add(30 * time.Second)
	for {
		sb2, err = c.Create(ctx, client.CreateRequest{})
		if err == nil {
			created = append(created, sb2.ID)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("create after Redis came back: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// It came from the pool that survived the outage.
	if sb2.ID != string(poolIDs[0]) {
		t.Fatalf("create after the outage got %s, not the pooled %s", sb2.ID, poolIDs[0])
	}
	if rec, err := rs.Get(ctx, sandbox.ID(sb2.ID)); err != nil || rec.Owner != "alice" || rec.Pool != "" || !rec.FromPool {
		t.Fatalf("handed-over record in Redis: %+v %v", rec, err)
	}
	page, err := c.List(ctx, client.ListOptions{})
	if err != nil || len(page.Sandboxes) != 2 {
		t.Fatalf("list: %+v %v", page, err)
	}

	// An agentscope-style session: its mapping (session key) is in Redis.
	sess, err := c.ConnectSession(ctx, "chat-1", client.ConnectSessionRequest{UserID: "u1"})
	if err != nil || len(sess.Sandboxes) != 1 {
		t.Fatalf("connect session: %+v %v", sess, err)
	}
	created = append(created, sess.Sandboxes[0].ID)
	if rec, err := rs.Get(ctx, sandbox.ID(sess.Sandboxes[0].ID)); err != nil || rec.SessionKey != "chat-1_u1" || rec.Owner != "alice" {
		t.Fatalf("session record in Redis: %+v %v", rec, err)
	}

	// kill -9 and restart: the daemon reattaches to every sandbox from
	// Redis, the session finds its sandbox again.
	d.kill()
	d.start()
	c = d.sdk(t, "k1")
	sess2, err := c.ConnectSession(ctx, "chat-1", client.ConnectSessionRequest{UserID: "u1"})
	if err != nil || len(sess2.Sandboxes) != 1 || sess2.Sandboxes[0].ID != sess.Sandboxes[0].ID {
		t.Fatalf("session after restart: %+v %v (was %s)", sess2, err, sess.Sandboxes[0].ID)
	}
	got, err := c.Get(ctx, sb.ID)
	if err != nil || got.Metadata["keep"] != "me" || got.AccessToken != sb.AccessToken {
		t.Fatalf("after restart: %+v %v", got, err)
	}
	res, err = c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"cat", "/workspace/f"}})
	if err != nil || res.Stdout != "state\n" {
		t.Fatalf("exec after restart: %+v %v", res, err)
	}
	for _, id := range created {
		if err := c.Delete(ctx, id); err != nil {
			t.Fatal(err)
		}
		if _, err := rs.Get(ctx, sandbox.ID(id)); !sandbox.IsNotFound(err) {
			t.Fatalf("record of deleted %s: %v", id, err)
		}
	}
	// Only the pool's refill is left: pooled sandboxes, and the ownerless
	// placeholder (state creating, not yet pooled) of one still booting.
	all, err := rs.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range all {
		refilling := r.State == sandbox.StateCreating && r.Owner == ""
		if r.Pool == "" && !refilling {
			t.Fatalf("record left in Redis: %+v", r)
		}
	}
}

// waitPooled waits (bounded) until d reports n pooled sandboxes.
func waitPooled(t *testing.T, d *daemon, n int) int {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		nodes := listNodes(t, d, "ko", http.StatusOK)
		for _, nd := range nodes {
			if nd.Address == d.url && nd.Pooled == n {
				return n
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool not filled: %+v", nodes)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// assertNoSandboxesBut checks the failed create left nothing behind.
func assertNoSandboxesBut(t *testing.T, d *daemon, c *client.Client, id string) {
	t.Helper()
	page, err := c.List(context.Background(), client.ListOptions{})
	if err != nil || len(page.Sandboxes) != 1 || page.Sandboxes[0].ID != id {
		t.Fatalf("after a failed create: %+v %v", page, err)
	}
	if n := sandboxProcesses(t, id); n == 0 {
		t.Fatal("the running sandbox lost its processes")
	}
}

func listNodes(t *testing.T, d *daemon, key string, want int) []store.Node {
	t.Helper()
	code, body := d.call(t, "GET", "/v1/nodes", key, nil)
	if code != want {
		t.Fatalf("GET /v1/nodes as %s: %d %s", key, code, body)
	}
	var out struct{ Nodes []store.Node }
	if code == http.StatusOK {
		if err := json.Unmarshal(body, &out); err != nil {
			t.Fatal(err)
		}
	}
	return out.Nodes
}

// agentscope's own Python suite against a daemon whose state (sandbox
// records, sessions, agentscope's meta, pool membership) is in Redis.
func TestAgentscopePythonSuiteOnRedis(t *testing.T) {
	requirePythonRequests(t)
	srv := testutil.StartRedis(t)
	storage := filepath.Join(testutil.ShortTempDir(t), "storage")
	d := startDaemon(t, "BEARER_TOKEN="+asToken, "API_KEYS="+asOtherToken+":bob", "CONTAINER_PREFIX_KEY="+asPrefix,
		fmt.Sprintf("HEARTBEAT_TIMEOUT=%d", asHeartbeat), fmt.Sprintf("MAX_SANDBOX_INSTANCES=%d", asMax),
		"POOL_SIZE=1", "DEFAULT_SANDBOX_TYPE=base", "STORAGE_FOLDER="+storage,
		"REDIS_ENABLED=true", "REDIS_SERVER=127.0.0.1", fmt.Sprintf("REDIS_PORT=%d", srv.Port))
	runPythonSuite(t, d, "test*.py", "AGENTBOX_OTHER_TOKEN="+asOtherToken, "AGENTBOX_PREFIX="+asPrefix,
		fmt.Sprintf("AGENTBOX_MAX_INSTANCES=%d", asMax), fmt.Sprintf("AGENTBOX_HEARTBEAT=%d", asHeartbeat),
		"AGENTBOX_STORAGE="+storage)
	// The state is in Redis: nothing the suite released is left there, and
	// the warm pool's refill (bounded wait: it may still be booting) is
	// recorded there with its node.
	rs, err := store.OpenRedis(context.Background(), store.RedisConfig{Addr: srv.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		recs, err := rs.List(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		pooled := 0
		for _, r := range recs {
			if r.Pool == "" {
				t.Fatalf("record of a sandbox the suite released: %+v", r)
			}
			if r.Node != "" {
				pooled++
			}
		}
		if pooled == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d pooled records in Redis, want 1 (POOL_SIZE=1)", pooled)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A daemon told to use a Redis that does not answer stops at start with an
// error naming the setting, instead of serving without its state.
func TestRedisUnreachableAtStart(t *testing.T) {
	testutil.RequireRoot(t)
	daemonBin, agentBin := binaries(t)
	dataDir := testutil.ShortTempDir(t)
	cmd := execCommand(daemonBin, "serve")
	cmd.Env = append(cmd.Env, "HOST=127.0.0.1", fmt.Sprintf("PORT=%d", freePort(t)), "AGENT_PATH="+agentBin,
		"AGENTBOX_DATA_DIR="+dataDir, "NETWORK=off",
		"REDIS_ENABLED=true", "REDIS_SERVER=127.0.0.1", fmt.Sprintf("REDIS_PORT=%d", freePort(t)), "REDIS_TIMEOUT=1")
	out := &testutil.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(out.String(), "REDIS_ENABLED") || !strings.Contains(out.String(), "Redis") {
			t.Fatalf("exit %v, output:\n%s", err, out.String())
		}
		assertNoLeftovers(t, dataDir)
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("daemon still running without its Redis:\n%s", out.String())
	}
}

// Redis stopped and started under load: three clients create, exec in and
// delete sandboxes while Redis goes away and comes back. Every refusal is
// a 503 (never a 500 or a hang), exec in a sandbox that exists always
// works, and after a restart of the daemon nothing in Redis points at a
// sandbox that is gone.
func TestRedisOutageUnderLoad(t *testing.T) {
	srv := testutil.StartRedis(t)
	d := startDaemon(t, "REDIS_ENABLED=true", "REDIS_SERVER=127.0.0.1", fmt.Sprintf("REDIS_PORT=%d", srv.Port),
		"REDIS_TIMEOUT=1", "API_KEYS=k1:alice", "POOL_SIZE=0")
	ctx := context.Background()
	c := d.sdk(t, "k1")

	var mu sync.Mutex
	var problems []string
	ok, refused := 0, 0
	note := func(op string, err error) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err == nil:
			ok++
		case client.IsUnavailable(err):
			refused++
		default:
			problems = append(problems, fmt.Sprintf("%s: %v", op, err))
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []string // sandboxes whose delete was refused
			for i := 0; i < 200; i++ {
				select {
				case <-stop:
					i = 200
					continue
				default:
				}
				sb, err := c.Create(ctx, client.CreateRequest{})
				note("create", err)
				if err != nil {
					time.Sleep(20 * time.Millisecond)
					continue
				}
				res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"echo", "hi"}})
				if err != nil || res.Stdout != "hi\n" {
					note("exec", fmt.Errorf("%+v %v", res, err))
				}
				err = c.Delete(ctx, sb.ID)
				note("delete", err)
				if err != nil {
					mine = append(mine, sb.ID)
				}
			}
			// Redis is back by now: retry the refused deletes (bounded).
			for _, id := range mine {
				var err error
				for try := 0; try < 100; try++ {
					if err = c.Delete(ctx, id); err == nil || client.IsNotFound(err) {
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
				if err != nil && !client.IsNotFound(err) {
					note("late delete", err)
				}
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	srv.Stop()
	time.Sleep(1500 * time.Millisecond)
	srv.Start()
	time.Sleep(1500 * time.Millisecond) // the client redials within about a second
	close(stop)
	wg.Wait()
	if len(problems) > 0 {
		t.Fatalf("%d failures that were not 503:\n%s", len(problems), strings.Join(problems, "\n"))
	}
	if ok == 0 || refused == 0 {
		t.Fatalf("ok %d, refused %d: the outage was not under load", ok, refused)
	}
	if page, err := c.List(ctx, client.ListOptions{}); err != nil || len(page.Sandboxes) != 0 {
		t.Fatalf("sandboxes left: %+v %v", page, err)
	}
	// Records whose delete hit the outage are dropped at the next start.
	d.stop()
	d.start()
	rs, err := store.OpenRedis(ctx, store.RedisConfig{Addr: srv.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	if recs, err := rs.List(ctx); err != nil || len(recs) != 0 {
		t.Fatalf("records left in Redis after the restart: %d %v", len(recs), err)
	}
	t.Logf("%d requests served, %d refused with 503 during the outage", ok, refused)
}
