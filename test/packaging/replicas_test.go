package packaging

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestComposeReplicas: the two replicas of deploy/compose/replicas.yaml,
// each the image with that file's privileges and environment on a network
// of their own (as compose makes one), over a real Redis: a sandbox made
// through one replica is listed, runs a command and is destroyed through
// the other (forwarded under CLUSTER_SECRET), and is gone for both. The
// file's redis service (an image from Docker Hub) is replaced by Debian's
// redis-server on the network's gateway: the tests pull nothing.
func TestComposeReplicas(t *testing.T) {
	needDocker(t)
	bin := binDir(t)
	image := testImage(t, bin)
	root := repoRoot(t)
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server not found (scripts/install-deps.sh installs it): %v", err)
	}
	rep := readCompose(t, "replicas.yaml", map[string]string{"API_KEYS": "k1:alice", "CLUSTER_SECRET": strings.Repeat("5e", 32), "SECRETS_KEY": strings.Repeat("a7", 32)})

	var b [4]byte
	_, _ = rand.Read(b[:])
	prefix := "agentbox-test-" + hex.EncodeToString(b[:])
	network := prefix
	run(t, root, nil, "docker", "network", "create", network)
	t.Cleanup(func() { _ = exec.Command("docker", "network", "rm", network).Run() })
	gw := strings.TrimSpace(run(t, root, nil, "docker", "network", "inspect", "-f", "{{(index .IPAM.Config 0).Gateway}}", network))

	// Redis on the gateway, reachable from the network only.
	l, err := net.Listen("tcp", net.JoinHostPort(gw, "0"))
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	redis := exec.Command("redis-server", "--bind", gw, "--port", port, "--dir", t.TempDir(),
		"--save", "", "--appendonly", "no", "--protected-mode", "no", "--loglevel", "warning")
	if err := redis.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = redis.Process.Kill(); _ = redis.Wait() })
	for i := 0; ; i++ {
		if c, err := net.DialTimeout("tcp", net.JoinHostPort(gw, port), time.Second); err == nil {
			c.Close()
			break
		}
		if i == 100 {
			t.Fatal("redis-server does not answer")
		}
		time.Sleep(100 * time.Millisecond)
	}

	urls := map[string]string{}
	for _, name := range []string{"agentbox-1", "agentbox-2"} {
		svc := rep.Services[name]
		svc.Environment["REDIS_PORT"] = port
		container, volume := prefix+"-"+name, prefix+"-"+name+"-data"
		t.Cleanup(func() {
			_ = exec.Command("docker", "rm", "-f", "-v", container).Run()
			_ = exec.Command("docker", "volume", "rm", "-f", volume).Run()
		})
		args := append([]string{"run", "-d", "--name", container, "--network", network, "--network-alias", name,
			"--add-host", "redis:" + gw, "-p", "127.0.0.1::8000", "-v", volume + ":/var/lib/agentbox"},
			dockerRunArgs(t, svc, filepath.Join(root, "deploy", "compose"))...)
		args = append(append(args, image), svc.Command...)
		run(t, root, nil, "docker", args...)
		addr, _, _ := strings.Cut(strings.TrimSpace(run(t, root, nil, "docker", "port", container, "8000/tcp")), "\n")
		urls[name] = "http://" + addr
		waitReady(t, container, urls[name])
	}
	cli := func(replica string, args ...string) string {
		t.Helper()
		return run(t, root, []string{"AGENTBOX_URL=" + urls[replica], "AGENTBOX_API_KEY=k1"}, filepath.Join(bin, "agentbox"), args...)
	}

	id := strings.TrimSpace(cli("agentbox-1", "create"))
	if ls := cli("agentbox-2", "ls"); !strings.Contains(ls, id) {
		t.Errorf("agentbox-2 does not list agentbox-1's sandbox %s:\n%s", id, ls)
	}
	if out := cli("agentbox-2", "exec", id, "--", "echo", "forwarded"); strings.TrimSpace(out) != "forwarded" {
		t.Errorf("exec through agentbox-2: %q", out)
	}
	cli("agentbox-2", "kill", id)
	for _, r := range []string{"agentbox-1", "agentbox-2"} {
		if ls := cli(r, "ls"); strings.Contains(ls, id) {
			t.Errorf("%s still lists %s after its kill:\n%s", r, id, ls)
		}
	}
}
