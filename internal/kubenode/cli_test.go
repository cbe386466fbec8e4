package kubenode

import (
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentbox/agentbox/internal/kubetest"
	"github.com/agentbox/agentbox/internal/template"
	"github.com/agentbox/agentbox/internal/testutil"
)

// TestNodeCommand runs the real `agentbox node` binary, configured only by
// its settings, against the control plane: it registers its Node, runs a
// pod from an image of its TEMPLATE_DIR, and on SIGTERM destroys the pod's
// sandbox, marks the Node not ready and exits cleanly.
func TestNodeCommand(t *testing.T) {
	testutil.RequireRoot(t)
	bin := os.Getenv("AGENTBOX_BIN")
	if bin == "" {
		t.Skip("AGENTBOX_BIN is unset (the Makefile sets it to bin/agentbox)")
	}
	c := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	dir := testutil.ShortTempDir(t)
	tmplDir := filepath.Join(dir, "templates")
	store, err := template.Open(ctx, tmplDir, template.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Import(ctx, tinyRootfs(t), "tiny", nil); err != nil {
		t.Fatal(err)
	}
	store.Close()

	name := "agentbox-cli-node"
	kubeconfig, _ := nodeIdentity(t, c, name)
	cert, key, err := c.ServingCert("kubelet-"+name, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	suffix := randHex(3)
	var out testutil.SyncBuffer
	cmd := exec.Command(bin, "node")
	cmd.Env = append(os.Environ(),
		"AGENTBOX_DATA_DIR="+filepath.Join(dir, "d"), "AGENT_PATH="+testutil.AgentBinary(t), "TEMPLATE_DIR="+tmplDir,
		"NETWORK=on", "NETWORK_BRIDGE=abkc"+hex.EncodeToString(suffix),
		fmt.Sprintf("NETWORK_SUBNET=10.%d.%d.0/24", 190+int(suffix[0])%40, suffix[1]),
		"KUBE_NODE_NAME="+name, "KUBE_NODE_KUBECONFIG="+kubeconfig, "KUBE_NODE_ADDRESS=127.0.0.1",
		fmt.Sprintf("KUBE_NODE_PORT=%d", port), "KUBE_NODE_TLS_CERT="+cert, "KUBE_NODE_TLS_KEY="+key,
		"KUBE_NODE_CLIENT_CA="+c.CAFile)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(2 * time.Minute):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("agentbox node output:\n%s", out.String())
		}
	})

	cs := c.Clientset
	ns := c.Namespace
	deadline := time.Now().Add(90 * time.Second)
	for {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err == nil && nodeReady(n) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s not ready (last error %v)\n%s", name, err, out.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	long := genericPod("cli", []string{"/bin/sh", "-c", "echo started; exec /bin/sleep 1000"})
	long.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": name}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, long, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := waitPod(t, ctx, cs, ns, "cli", "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	if p.Spec.NodeName != name || p.Status.PodIP == "" {
		t.Fatalf("pod on %q with IP %q", p.Spec.NodeName, p.Status.PodIP)
	}
	id := sandboxID(string(p.UID))
	for i := 0; ; i++ {
		logs, err := cs.CoreV1().Pods(ns).GetLogs("cli", &corev1.PodLogOptions{}).DoRaw(ctx)
		if err == nil && strings.Contains(string(logs), "started") {
			break
		}
		if i == 50 {
			t.Fatalf("pod log %q (err %v)", logs, err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err // for the cleanup
		if err != nil {
			t.Fatalf("agentbox node exited with %v\n%s", err, out.String())
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("agentbox node did not exit on SIGTERM\n%s", out.String())
	}
	if n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); err != nil || nodeReady(n) {
		t.Fatalf("node after SIGTERM: ready %v, err %v", err == nil && nodeReady(n), err)
	}
	if m, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(m), string(id)) {
		t.Fatalf("mounts of sandbox %s remain after the node stopped", id)
	}
	if _, err := os.Stat(filepath.Join(dir, "d", "native", "state", "sb", string(id))); !os.IsNotExist(err) {
		t.Fatalf("state of sandbox %s remains after the node stopped: %v", id, err)
	}
}
