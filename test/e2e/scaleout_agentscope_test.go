package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/testutil"
)

// asData calls an agentscope method on d as alice and returns its data,
// failing the test on any answer but 200.
func asData(t *testing.T, d *daemon, method string, body map[string]any) any {
	t.Helper()
	status, m := asCall(t, d, method, "k1", body)
	if status != http.StatusOK {
		t.Fatalf("%s on %s: %d %v", method, d.url, status, m)
	}
	return m["data"]
}

func asStrings(t *testing.T, v any) []string {
	t.Helper()
	list, ok := v.([]any)
	if !ok {
		t.Fatalf("not a list: %#v", v)
	}
	out := make([]string, len(list))
	for i, x := range list {
		out[i], _ = x.(string)
	}
	return out
}

func asInfo(t *testing.T, d *daemon, name string) map[string]any {
	t.Helper()
	info, ok := asData(t, d, "get_info", map[string]any{"identity": name}).(map[string]any)
	if !ok {
		t.Fatalf("get_info %s: not an object", name)
	}
	return info
}

func asCreate(t *testing.T, d *daemon, session string) string {
	t.Helper()
	body := map[string]any{"sandbox_type": "base"}
	if session != "" {
		body["meta"] = map[string]any{"session_ctx_id": session}
	}
	name, ok := asData(t, d, "create", body).(string)
	if !ok || name == "" {
		t.Fatalf("create on %s gave no name", d.url)
	}
	return name
}

// agentscope's state is shared by the replicas (Redis) and follows its
// sandboxes whichever API ends them:
//   - a session's mapping and keys answer the same on both replicas;
//   - a sandbox deleted through the native API (forwarded to the replica
//     that runs it) leaves its session at once, its record shows
//     "released" on both, and the replica that ran it dropped its MCP
//     servers (the gone hook);
//   - a session recycled on A and restored by a call through B (on A or B:
//     which one depends on whether A had finished destroying it): calls on
//     the old identity through the other replica are served by the new
//     sandbox's, and releasing the old identity through the other replica
//     releases the new one;
//   - cleanup through A releases the caller's sandboxes of both replicas.
func TestScaleOutAgentscopeState(t *testing.T) {
	requirePythonRequests(t) // the MCP echo server is a Python script
	_, rs, ds := startReplicas(t, 2, "CLUSTER_PLACEMENT=local", "POOL_SIZE=0", "HEARTBEAT_TIMEOUT=4", "CONTAINER_PREFIX_KEY="+asPrefix)
	a, b := ds[0], ds[1]

	// 1. One session, mapped the same through either replica.
	key := fmt.Sprintf("sess-%d", time.Now().UnixNano())
	s1 := asCreate(t, a, key)
	for _, d := range []*daemon{a, b} {
		if got := asStrings(t, asData(t, d, "get_session_mapping", map[string]any{"session_ctx_id": key})); !slices.Equal(got, []string{s1}) {
			t.Fatalf("mapping through %s: %v", d.url, got)
		}
		if keys := asStrings(t, asData(t, d, "list_session_keys", nil)); !slices.Contains(keys, key) {
			t.Fatalf("session keys through %s: %v", d.url, keys)
		}
	}

	// 2. An MCP server on a sandbox of A, then the sandbox deleted through
	// B's native API: gone from the session and released on both, its MCP
	// servers dropped on A.
	root, err := testutil.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	server, err := os.ReadFile(filepath.Join(root, "test", "compat", "agentscope", "mcp_echo_server.py"))
	if err != nil {
		t.Fatal(err)
	}
	if st, out := a.call(t, "PUT", "/proxy/"+s1+"/workspace/file?path=mcp_echo.py", "k1", server); st != http.StatusOK {
		t.Fatalf("upload the MCP server: %d %s", st, out)
	}
	cfg := map[string]any{"mcpServers": map[string]any{"echo": map[string]any{"command": "python3", "args": []string{"/workspace/mcp_echo.py"}}}}
	if got := asData(t, b, "add_mcp_servers", map[string]any{"identity": s1, "server_configs": cfg}); got != "OK" {
		t.Fatalf("add_mcp_servers through B: %v", got)
	}
	if tools, _ := asData(t, b, "list_tools", map[string]any{"identity": s1}).(map[string]any); tools["echo"] == nil {
		t.Fatalf("list_tools through B: %v", tools)
	}
	id1 := strings.TrimPrefix(s1, asPrefix)
	if st, out := b.call(t, "DELETE", "/v1/sandboxes/"+id1, "k1", nil); st != http.StatusNoContent && st != http.StatusOK {
		t.Fatalf("native delete through B: %d %s", st, out)
	}
	for _, d := range []*daemon{a, b} {
		if got := asStrings(t, asData(t, d, "get_session_mapping", map[string]any{"session_ctx_id": key})); len(got) != 0 {
			t.Fatalf("mapping through %s after a native delete: %v", d.url, got)
		}
		if keys := asStrings(t, asData(t, d, "list_session_keys", nil)); slices.Contains(keys, key) {
			t.Fatalf("session keys through %s after a native delete: %v", d.url, keys)
		}
		if info := asInfo(t, d, s1); info["state"] != "released" || info["released_at"] == nil {
			t.Fatalf("get_info through %s after a native delete: %v", d.url, info)
		}
	}
	if !strings.Contains(a.logs.String(), "dropped the MCP servers and browser connection of a gone sandbox") {
		t.Fatal("A kept the MCP servers of a sandbox deleted through the native API")
	}

	// 3. Recycled on A, restored through B, used and released through the
	// replica that does not run the new sandbox.
	key2 := key + "-2"
	old := asCreate(t, a, key2)
	deadline := time.Now().Add(60 * time.Second)
	for asInfo(t, b, old)["state"] != "recycled" {
		if time.Now().After(deadline) {
			t.Fatalf("%s not recycled within 60 s of a 4 s heartbeat timeout: %v", old, asInfo(t, b, old))
		}
		time.Sleep(250 * time.Millisecond)
	}
	// Its sandbox is destroyed right after it is marked recycled.
	for {
		if _, err := rs.Get(context.Background(), sandbox.ID(strings.TrimPrefix(old, asPrefix))); sandbox.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the recycled sandbox %s was not destroyed", old)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := asStrings(t, asData(t, a, "get_session_mapping", map[string]any{"session_ctx_id": key2})); !slices.Equal(got, []string{old}) {
		t.Fatalf("mapping of a recycled session through A: %v", got)
	}
	if got := asData(t, b, "check_health", map[string]any{"identity": old}); got != true {
		t.Fatalf("check_health through B: %v", got)
	}
	info := asInfo(t, a, old)
	nw, _ := info["redirect_to"].(string)
	if info["state"] != "replaced" || nw == "" || nw == old {
		t.Fatalf("old record after the restore, through A: %v", info)
	}
	if !strings.Contains(b.logs.String(), "agentscope sandbox restored") {
		t.Fatal("B did not restore the session")
	}
	host, err := rs.Get(context.Background(), sandbox.ID(strings.TrimPrefix(nw, asPrefix)))
	if err != nil || host.Node != "r1" {
		t.Fatalf("the new sandbox runs on %+v (%v), want B (r1)", host, err)
	}
	res, _ := asData(t, a, "call_tool", map[string]any{"identity": old, "tool_name": "run_shell_command",
		"arguments": map[string]any{"command": "echo served-by-new"}}).(map[string]any)
	if content, _ := res["content"].([]any); len(content) == 0 || !strings.Contains(fmt.Sprint(content[0]), "served-by-new") {
		t.Fatalf("call_tool on the old identity through A: %v", res)
	}
	if got := asData(t, a, "release", map[string]any{"identity": old}); got != true {
		t.Fatalf("release of the old identity through A: %v", got)
	}
	if st := asInfo(t, b, nw)["state"]; st != "released" {
		t.Fatalf("the sandbox that replaced it, through B: %v", st)
	}
	if st, _ := b.call(t, "GET", "/v1/sandboxes/"+strings.TrimPrefix(nw, asPrefix), "k1", nil); st != http.StatusNotFound {
		t.Fatalf("the released sandbox still exists: GET %d", st)
	}
	if got := asStrings(t, asData(t, a, "get_session_mapping", map[string]any{"session_ctx_id": key2})); len(got) != 0 {
		t.Fatalf("mapping after the release: %v", got)
	}

	// 4. cleanup through A releases the caller's sandboxes of both.
	x, y := asCreate(t, a, ""), asCreate(t, b, "")
	if got := asData(t, a, "cleanup", nil); got != nil {
		t.Fatalf("cleanup: %v", got)
	}
	for _, name := range []string{x, y} {
		if st := asInfo(t, b, name)["state"]; st != "released" {
			t.Fatalf("%s after cleanup through A: %v", name, st)
		}
		if st, _ := b.call(t, "GET", "/v1/sandboxes/"+strings.TrimPrefix(name, asPrefix), "k1", nil); st != http.StatusNotFound {
			t.Fatalf("%s still exists after cleanup: GET %d", name, st)
		}
	}
}

// Two replicas configured by an agentscope sandbox server's own .env (its
// REDIS_* settings, spelled as agentscope writes them: an ACL user and
// password, database 3, its pool key; REDIS_PORT_KEY accepted and
// ignored) serve agentscope's suite through a round-robin balancer, with
// their state in that database under that pool key and nothing in
// database 0. A wrong password stops a daemon at start with a clear error
// that does not print the password.
func TestAgentscopeRedisSettingsTwoReplicas(t *testing.T) {
	requirePythonRequests(t)
	const user, password, defaultPassword = "agentscope", "user-pw-31c9e5", "default-pw-8d02aa"
	srv := testutil.StartRedisACL(t, user, password, defaultPassword)
	storage := filepath.Join(testutil.ShortTempDir(t), "storage")
	envFile := filepath.Join(t.TempDir(), "agentscope.env")
	if err := os.WriteFile(envFile, []byte(fmt.Sprintf(`# agentscope-runtime sandbox server settings
BEARER_TOKEN=%s
DEFAULT_SANDBOX_TYPE=base
POOL_SIZE=1
AUTO_CLEANUP=True
CONTAINER_PREFIX_KEY=%s
PORT_RANGE=[49152,59152]
STORAGE_FOLDER=%s
HEARTBEAT_TIMEOUT=%d

# Redis settings
REDIS_ENABLED=True
REDIS_SERVER=localhost
REDIS_PORT=%d
REDIS_DB=3
REDIS_USER=%s
REDIS_PASSWORD=%s
REDIS_PORT_KEY=_agent_runtime_container_occupied_ports
REDIS_CONTAINER_POOL_KEY=_agent_runtime_container_container_pool
`, asToken, asPrefix, storage, asHeartbeat, srv.Port, user, password)), 0o600); err != nil {
		t.Fatal(err)
	}

	bin, agentBin := binaries(t)
	const wrong = "not-the-pw-5e1b77"
	cmd := exec.Command(bin, "serve", "--config", envFile, "--set", "REDIS_PASSWORD="+wrong, "--set", "AGENTBOX_DATA_DIR="+t.TempDir())
	cmd.Env = append(cleanEnv(), "AGENT_PATH="+agentBin, "NETWORK=off")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "Redis") || strings.Contains(string(out), wrong) {
		t.Fatalf("a wrong REDIS_PASSWORD: %v\n%s", err, out)
	}

	extra := []string{"API_KEYS=" + asOtherToken + ":bob", "CLUSTER_SECRET=" + clusterSecret, fmt.Sprintf("MAX_SANDBOX_INSTANCES=%d", asMax),
		"SECRETS_KEY=" + testSecretsKey}
	a := startDaemonArgs(t, testutil.ShortTempDir(t), []string{"--config", envFile}, append(extra, "NODE_ID=r0")...)
	b := startDaemonArgs(t, testutil.ShortTempDir(t), []string{"--config", envFile}, append(extra, "NODE_ID=r1")...)
	if !strings.Contains(a.logs.String(), "REDIS_PORT_KEY") {
		t.Fatal("REDIS_PORT_KEY was not reported as ignored")
	}
	url, served := roundRobin(t, []*daemon{a, b})
	lb := &daemon{t: t, url: url, logs: &testutil.SyncBuffer{}}
	runPythonSuite(t, lb, "test*.py", "AGENTBOX_OTHER_TOKEN="+asOtherToken, "AGENTBOX_PREFIX="+asPrefix,
		fmt.Sprintf("AGENTBOX_MAX_INSTANCES=%d", asMax), fmt.Sprintf("AGENTBOX_HEARTBEAT=%d", asHeartbeat),
		"AGENTBOX_STORAGE="+storage)
	if n0, n1 := served[0].Load(), served[1].Load(); n0 < 50 || n1 < 50 {
		t.Fatalf("the balancer sent %d and %d requests to the replicas", n0, n1)
	}

	ctx := context.Background()
	keys := func(db int, pattern string) []string {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr(), DB: db, Username: user, Password: password})
		defer c.Close()
		k, err := c.Keys(ctx, pattern).Result()
		if err != nil {
			t.Fatalf("KEYS %s in db %d: %v", pattern, db, err)
		}
		return k
	}
	if k := keys(3, "agentbox:node:*"); len(k) != 2 {
		t.Fatalf("node keys in db 3: %v", k)
	}
	// Each replica's warm pool (refilled once the suite's takes are done;
	// an empty set is no key in Redis).
	deadline := time.Now().Add(60 * time.Second)
	for _, node := range []string{"r0", "r1"} {
		for len(keys(3, "_agent_runtime_container_container_pool:"+node+":*")) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("no pool set of %s under REDIS_CONTAINER_POOL_KEY in db 3: %v", node, keys(3, "*"))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if k := keys(0, "*"); len(k) != 0 {
		t.Fatalf("keys in db 0: %v", k)
	}
}

// Three replicas, creates through one of them: least_loaded spreads them
// (each goes to the replica with the fewest handed-out sandboxes, counting
// the creates sent since its last heartbeat), and r2, full at its
// NODE_MAX_SANDBOXES=1, gets one and is skipped after: every create
// succeeds. A create sent to the full replica itself is placed elsewhere.
func TestScaleOutPlacementThreeReplicas(t *testing.T) {
	srv := testutil.StartRedis(t)
	settings := []string{"REDIS_ENABLED=true", "REDIS_SERVER=127.0.0.1", fmt.Sprintf("REDIS_PORT=%d", srv.Port),
		"API_KEYS=k1:alice,ko:ops", "TEMPLATE_ADMIN_USERS=ops", "CLUSTER_SECRET=" + clusterSecret,
		"NETWORK=off", "DEFAULT_DISK=64M", "POOL_SIZE=0", "CLUSTER_PLACEMENT=least_loaded"}
	ds := []*daemon{
		startDaemon(t, append(settings, "NODE_ID=r0")...),
		startDaemon(t, append(settings, "NODE_ID=r1")...),
		startDaemon(t, append(settings, "NODE_ID=r2", "NODE_MAX_SANDBOXES=1")...),
	}
	for _, d := range ds {
		waitNodes(t, d, 3)
	}
	for _, n := range listNodes(t, ds[0], "ko", http.StatusOK) {
		if want := map[string]int{"r2": 1}[n.ID]; n.MaxSandboxes != want {
			t.Fatalf("node %s announces max_sandboxes %d, want %d", n.ID, n.MaxSandboxes, want)
		}
	}
	rs, err := store.OpenRedis(context.Background(), store.RedisConfig{Addr: srv.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	on := map[string]int{}
	c0 := ds[0].sdk(t, "k1")
	for i := 0; i < 9; i++ {
		sb, err := c0.Create(ctx, client.CreateRequest{Timeout: 5 * time.Minute})
		if err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
		rec, err := rs.Get(ctx, sandbox.ID(sb.ID))
		if err != nil {
			t.Fatal(err)
		}
		on[rec.Node]++
	}
	// r2 took exactly its one; r0 and r1 shared the rest (each create to
	// the one with fewer; a heartbeat landing mid-create may count one
	// twice, so not always 4 and 4).
	if on["r2"] != 1 || on["r0"] < 3 || on["r1"] < 3 || on["r0"]+on["r1"] != 8 {
		t.Fatalf("creates per replica: %v", on)
	}
	// Through the full replica itself: placed on another.
	sb, err := ds[2].sdk(t, "k1").Create(ctx, client.CreateRequest{Timeout: 5 * time.Minute})
	if err != nil {
		t.Fatalf("create through the full replica: %v", err)
	}
	if rec, err := rs.Get(ctx, sandbox.ID(sb.ID)); err != nil || rec.Node == "r2" {
		t.Fatalf("a create through the full replica ran on %v (%v)", rec, err)
	}
}
