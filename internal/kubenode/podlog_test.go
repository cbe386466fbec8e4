package kubenode

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentbox/agentbox/internal/backend/native"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/testutil"
)

// TestSecurityGenericPodLogBounded: a generic pod's output is stored on the
// node's disk (the log kubectl logs reads), outside the sandbox's disk
// cap. A pod that prints without end must not fill the node: the log
// rotates at a bound, as a kubelet's does, and a follower (kubectl logs
// -f) carries on across the rotation to the end of the output. No control
// plane is needed: the provider runs the pod's process on a native
// sandbox directly.
func TestSecurityGenericPodLogBounded(t *testing.T) {
	testutil.RequireRoot(t)
	dir := testutil.ShortTempDir(t)
	nb, err := native.New(native.Config{Root: filepath.Join(dir, "n"), AgentPath: testutil.AgentBinary(t), Logger: quietLogger()})
	if err != nil {
		t.Fatalf("native.New: %v", err)
	}
	t.Cleanup(func() {
		if err := nb.Close(); err != nil {
			t.Errorf("close backend: %v", err)
		}
	})
	logDir := filepath.Join(dir, "logs")
	if err := os.Mkdir(logDir, 0o700); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// 40 MiB of output, after a pause that lets the follower start on the
	// first file.
	const total = 40 << 20
	spec := sandbox.Spec{ID: sandbox.NewID(), Template: sandbox.HostTemplate(), AccessToken: "pod-token"}
	info, err := nb.Create(ctx, spec)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() { _ = nb.Destroy(context.Background(), spec.ID) })
	st := &podState{
		key: podKey("ns", "chatty"), ready: make(chan struct{}), token: spec.AccessToken,
		pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "chatty"}, Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever}},
		plan: &podPlan{id: spec.ID, container: "c", image: "host", spec: spec,
			cmd: []string{"/bin/sh", "-c", `echo start; sleep 1; head -c 41943040 /dev/zero | tr '\0' x; echo; echo end`}},
	}
	close(st.ready)
	p := &provider{cfg: &Config{Backend: nb, LogDir: logDir}, log: quietLogger(), pods: map[string]*podState{st.key: st}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.runGeneric(ctx, st, info)
	}()
	// Follow the log from its first line.
	deadline := time.Now().Add(30 * time.Second)
	for {
		st.mu.Lock()
		started := st.logPath != ""
		st.mu.Unlock()
		if started {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the pod's log was not started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	rc, err := p.GetContainerLogs(ctx, "ns", "chatty", "c", api.ContainerLogOpts{Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	followed := make(chan []byte, 1)
	go func() {
		var head, tail bytes.Buffer
		n, _ := io.Copy(&limitedTail{head: &head, tail: &tail}, rc)
		rc.Close()
		followed <- append(append(head.Bytes(), []byte("|"+strconv.FormatInt(n, 10)+"|")...), tail.Bytes()...)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("the pod did not end")
	}
	st.mu.Lock()
	phase := st.pod.Status.Phase
	st.mu.Unlock()
	if phase != corev1.PodSucceeded {
		t.Fatalf("pod phase %s", phase)
	}

	var sum int64
	entries, _ := os.ReadDir(logDir)
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		sum += fi.Size()
		if fi.Size() > 16<<20 {
			t.Errorf("log file %s is %d bytes: a pod's output fills the node's disk", e.Name(), fi.Size())
		}
	}
	if sum > 32<<20 {
		t.Errorf("the pod's logs take %d bytes of the node's disk for %d bytes of output", sum, total)
	}
	// The current log ends with the output's end.
	rc, err = p.GetContainerLogs(ctx, "ns", "chatty", "c", api.ContainerLogOpts{Tail: 1})
	if err != nil {
		t.Fatal(err)
	}
	last, _ := io.ReadAll(rc)
	rc.Close()
	if string(last) != "end\n" {
		t.Errorf("last line %q", last)
	}
	select {
	case got := <-followed:
		if !bytes.HasPrefix(got, []byte("start\n")) || !bytes.HasSuffix(got, []byte("xxxx\nend\n")) {
			t.Errorf("the follower saw %.40q ... %.40q", got, got[max(0, len(got)-40):])
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the follower did not end with the pod")
	}
	// Deleting the pod removes its logs.
	if err := p.DeletePod(ctx, st.pod); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(logDir); len(entries) != 0 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("logs left after the pod's delete: %s", strings.Join(names, " "))
	}
}

// limitedTail keeps the first 64 and the last 64 bytes written.
type limitedTail struct{ head, tail *bytes.Buffer }

func (l *limitedTail) Write(b []byte) (int, error) {
	if n := 64 - l.head.Len(); n > 0 {
		l.head.Write(b[:min(n, len(b))])
	}
	l.tail.Write(b)
	if l.tail.Len() > 64 {
		keep := append([]byte(nil), l.tail.Bytes()[l.tail.Len()-64:]...)
		l.tail.Reset()
		l.tail.Write(keep)
	}
	return len(b), nil
}
