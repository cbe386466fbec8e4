package kubetest

import (
	"context"
	"net/netip"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestNode: the real node (kubelet, containerd, runc, bridge CNI)
// registers Ready, kube-scheduler places a pod on it, the pod runs from
// an imported image with an IP of the node's subnet, and Close leaves no
// process, mount, bridge, cgroup or iptables chain behind.
func TestNode(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("the real node needs root")
	}
	c := StartWith(t, Options{NoController: true})
	n := StartNode(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pods := c.Clientset.CoreV1().Pods(c.Namespace)
	never := corev1.PullNever
	grace := int64(1)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pause"},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &grace,
			Containers:                    []corev1.Container{{Name: "main", Image: PauseImage, ImagePullPolicy: never}},
		},
	}
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var ip netip.Addr
	if err := poll(ctx, 2*time.Minute, "the pod running", func() error {
		p, err := pods.Get(ctx, "pause", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning || p.Spec.NodeName != n.Name {
			return &phaseError{p.Status.Phase, p.Spec.NodeName}
		}
		ip, err = netip.ParseAddr(p.Status.PodIP)
		return err
	}); err != nil {
		t.Fatalf("%v\nkubelet:\n%s", err, n.Log("kubelet", 20))
	}
	if !n.Subnet.Contains(ip) {
		t.Fatalf("pod IP %s outside the node's subnet %s", ip, n.Subnet)
	}
	if err := pods.Delete(ctx, "pause", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := poll(ctx, time.Minute, "the pod gone", func() error {
		_, err := pods.Get(ctx, "pause", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return errStill
	}); err != nil {
		t.Fatal(err)
	}
	dir := n.Dir
	if left := n.Close(); len(left) > 0 {
		t.Fatalf("close: %v", left)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the node's dir %s after Close: %v", dir, err)
	}
}
