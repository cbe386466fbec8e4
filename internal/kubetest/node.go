package kubetest

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ErrNoNodeTools is returned by StartNode when the real node's binaries
// (kubelet, containerd, the CNI plugins) are not built.
var ErrNoNodeTools = errors.New("kubetest: the real node's tools (kubelet, containerd, CNI plugins) are not built (run `make k8s-tools`)")

// Node is one real Kubernetes node of the cluster: the pinned kubelet on a
// containerd of its own (own config, socket, root and state dirs, CRI with
// the pinned runc) and a bridge CNI network with host-local IPAM on a private /24
// the node owns. Everything it creates is under Dir or named after it,
// and Close removes all of it.
type Node struct {
	Name string
	// Dir is short: unix socket paths live in it.
	Dir string
	// Socket is containerd's; Namespace "k8s.io" holds the CRI's images.
	Socket string
	// Subnet is the pod network; Gateway (on Bridge) is the node's IP.
	Subnet  netip.Prefix
	Gateway netip.Addr
	Bridge  string
	network string // the CNI network's name

	c          *Cluster
	procs      []*proc
	sysctls    map[string]string // host values kubelet overwrites, restored by Close
	chainsNew  bool              // kubelet's iptables chains did not exist before
	cgroupsNew bool              // neither did its kubepods cgroups
	lock       *os.File          // held while the node exists (lockNode)
}

// PauseImage is the pod sandbox image the node's containerd is configured
// with, imported from the tools' pause binary (never pulled).
const PauseImage = "kubetest.local/pause:1"

// kubeletSysctls are the host settings kubelet sets on start
// (setupKernelTunables); Close puts back what was there.
var kubeletSysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

// kubeletChains are the iptables chains kubelet creates (initNetworkUtil).
var kubeletChains = map[string][]string{
	"mangle": {"KUBE-IPTABLES-HINT", "KUBE-KUBELET-CANARY"},
	"nat":    {"KUBE-KUBELET-CANARY"},
	"filter": {"KUBE-FIREWALL", "KUBE-KUBELET-CANARY"},
}

// StartNode starts a real node on c and closes it in t.Cleanup, failing t
// if anything of it is left behind. It skips when the node's tools are not
// built, unless AGENTBOX_REQUIRE_K8S is set; it also skips when this
// machine already runs a kubelet (its cgroups or iptables chains exist).
func StartNode(t testing.TB, c *Cluster) *Node {
	t.Helper()
	// Long enough to wait out another package's node (lockNode) too.
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	n, err := c.NewNode(ctx)
	if errors.Is(err, ErrNoNodeTools) {
		if os.Getenv("AGENTBOX_REQUIRE_K8S") != "" {
			t.Fatalf("%v; AGENTBOX_REQUIRE_K8S is set, so this fails instead of skipping", err)
		}
		t.Skipf("%v; the real-node tests need them", err)
	}
	if errors.Is(err, errKubeletPresent) {
		t.Skipf("%v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range n.procs {
				t.Logf("--- %s log (last %d lines) ---\n%s", p.name, 30, p.tail(30))
			}
		}
		if left := n.Close(); len(left) > 0 {
			t.Errorf("the node left behind: %s", strings.Join(left, "; "))
		}
	})
	return n
}

var errKubeletPresent = errors.New("kubetest: this machine already has a kubelet's cgroups or iptables chains; the real node needs them to itself")

// NewNode starts a real node; Close stops it.
func (c *Cluster) NewNode(ctx context.Context) (_ *Node, err error) {
	if !nodeToolsPresent(c.ToolsDir) {
		return nil, fmt.Errorf("%w: not all of %v in %s", ErrNoNodeTools, nodeToolNames, c.ToolsDir)
	}
	// kubepods and kubelet's iptables chains are machine-wide names: one
	// real node at a time on this machine (test packages run in
	// parallel), the next waits.
	lock, err := lockNode(ctx)
	if err != nil {
		return nil, err
	}
	if existingKubelet() {
		lock.Close()
		return nil, errKubeletPresent
	}
	suffix := make([]byte, 3)
	if _, err := rand.Read(suffix); err != nil {
		lock.Close()
		return nil, fmt.Errorf("kubetest: %w", err)
	}
	h := hex.EncodeToString(suffix)
	dir, err := os.MkdirTemp("", "abkn-")
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("kubetest: %w", err)
	}
	n := &Node{Name: "kubetest-" + h, Dir: dir, Bridge: "abkl" + h, network: "kubetest-" + h, c: c,
		chainsNew: true, cgroupsNew: true, lock: lock}
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	if n.Subnet, err = freeSubnet(suffix); err != nil {
		return nil, err
	}
	n.Gateway = n.Subnet.Addr().Next()
	n.sysctls = map[string]string{}
	for _, s := range kubeletSysctls {
		if b, err := os.ReadFile("/proc/sys/" + s); err == nil {
			n.sysctls[s] = strings.TrimSpace(string(b))
		}
	}
	if err := n.makeBridge(ctx); err != nil {
		return nil, err
	}
	if err := n.startContainerd(ctx); err != nil {
		return nil, err
	}
	if err := n.importPause(ctx); err != nil {
		return nil, err
	}
	if err := n.startKubelet(ctx); err != nil {
		return nil, err
	}
	return n, nil
}

// existingKubelet reports whether another kubelet's state is on this
// machine: Close would otherwise remove what is not the node's.
func existingKubelet() bool {
	if _, err := os.Stat("/sys/fs/cgroup/memory/kubepods"); err == nil {
		return true
	}
	if _, err := os.Stat("/sys/fs/cgroup/kubepods"); err == nil {
		return true
	}
	if _, err := os.Stat("/sys/fs/cgroup/kubepods.slice"); err == nil {
		return true
	}
	out, _ := exec.Command("iptables", "-t", "filter", "-S", "KUBE-FIREWALL").CombinedOutput()
	return strings.HasPrefix(string(out), "-N KUBE-FIREWALL")
}

// freeSubnet picks a /24 in 10.232.0.0/13 that no interface of this
// machine is on.
func freeSubnet(seed []byte) (netip.Prefix, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("kubetest: %w", err)
	}
	for i := range 64 {
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 232 + (seed[0]+byte(i))%8, seed[1] + byte(i), 0}), 24)
		taken := false
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok {
				if pa, ok := netip.AddrFromSlice(ipn.IP); ok {
					ones, _ := ipn.Mask.Size()
					if netip.PrefixFrom(pa.Unmap(), ones).Masked().Overlaps(p) {
						taken = true
					}
				}
			}
		}
		if !taken {
			return p, nil
		}
	}
	return netip.Prefix{}, errors.New("kubetest: no free /24 in 10.232.0.0/13 for the node's pods")
}

func run(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("kubetest: %s %s: %w: %s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

// makeBridge creates the pod bridge with the gateway address up front:
// the gateway is the node's InternalIP (kubelet refuses a loopback one),
// so it must exist before kubelet starts. The bridge plugin reuses it.
func (n *Node) makeBridge(ctx context.Context) error {
	gw := netip.PrefixFrom(n.Gateway, n.Subnet.Bits()).String()
	for _, args := range [][]string{
		{"link", "add", "name", n.Bridge, "type", "bridge"},
		{"addr", "add", gw, "dev", n.Bridge},
		{"link", "set", n.Bridge, "up"},
	} {
		if err := run(ctx, "ip", args...); err != nil {
			return err
		}
	}
	return nil
}

func (n *Node) path(p ...string) string { return filepath.Join(append([]string{n.Dir}, p...)...) }

func (n *Node) startContainerd(ctx context.Context) error {
	for _, d := range []string{"containerd/root", "containerd/state", "net.d", "ipam", "kubelet", "logs"} {
		if err := os.MkdirAll(n.path(d), 0o700); err != nil {
			return fmt.Errorf("kubetest: %w", err)
		}
	}
	n.Socket = n.path("containerd.sock")
	tools := n.c.ToolsDir
	conf := fmt.Sprintf(`version = 3
root = %q
state = %q

[grpc]
  address = %q

[ttrpc]
  address = %q

[metrics]
  address = ""

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = %q

[plugins.'io.containerd.cri.v1.runtime']
  enable_selinux = false
  netns_mounts_under_state_dir = true
  # Kubelet asks for oom_score_adj below containerd's own (-998 for the
  # pause container); a test host without CAP_SYS_RESOURCE refuses that.
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = %q
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = [%q]
    conf_dir = %q
    max_conf_num = 1
`, n.path("containerd/root"), n.path("containerd/state"), n.Socket, n.Socket+".ttrpc",
		PauseImage, filepath.Join(tools, "runc"), filepath.Join(tools, "cni"), n.path("net.d"))
	if err := os.WriteFile(n.path("containerd.toml"), []byte(conf), 0o600); err != nil {
		return fmt.Errorf("kubetest: %w", err)
	}
	cni := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": %q,
  "plugins": [{
    "type": "bridge",
    "bridge": %q,
    "isGateway": true,
    "ipMasq": false,
    "ipam": {"type": "host-local", "ranges": [[{"subnet": %q, "gateway": %q}]], "dataDir": %q}
  }]
}
`, n.network, n.Bridge, n.Subnet.String(), n.Gateway.String(), n.path("ipam"))
	if err := os.WriteFile(n.path("net.d", "10-kubetest.conflist"), []byte(cni), 0o600); err != nil {
		return fmt.Errorf("kubetest: %w", err)
	}
	// The shim is found on PATH: the pinned one first.
	env := []string{"PATH=" + tools + ":" + os.Getenv("PATH")}
	p, err := startProc(n.path("logs"), "containerd", filepath.Join(tools, "containerd"), []string{"--config", n.path("containerd.toml")}, env)
	if err != nil {
		return err
	}
	n.procs = append(n.procs, p)
	return p.waitFor(60*time.Second, "serving CRI", func() error {
		return n.ctr(ctx, nil, "version")
	})
}

// ctr runs the pinned ctr against the node's containerd, in the CRI's
// namespace.
func (n *Node) ctr(ctx context.Context, out *[]byte, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(n.c.ToolsDir, "ctr"), append([]string{"--address", n.Socket, "--namespace", "k8s.io"}, args...)...)
	b, err := cmd.CombinedOutput()
	if out != nil {
		*out = b
	}
	if err != nil {
		return fmt.Errorf("kubetest: ctr %s: %w: %s", strings.Join(args, " "), err, b)
	}
	return nil
}

func (n *Node) importPause(ctx context.Context) error {
	root := n.path("pause-rootfs")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return fmt.Errorf("kubetest: %w", err)
	}
	b, err := os.ReadFile(filepath.Join(n.c.ToolsDir, "pause"))
	if err != nil {
		return fmt.Errorf("kubetest: %w", err)
	}
	if err := os.WriteFile(filepath.Join(root, "pause"), b, 0o755); err != nil {
		return fmt.Errorf("kubetest: %w", err)
	}
	defer os.RemoveAll(root)
	return n.ImportImage(ctx, PauseImage, root, ImageConfig{Entrypoint: []string{"/pause"}})
}

// ImportImage loads root (a directory tree) as a one-layer image named
// ref into the node's containerd, unpacked for the CRI: pods name it with
// ImagePullPolicy IfNotPresent (or Never) and nothing is pulled.
func (n *Node) ImportImage(ctx context.Context, ref, root string, cfg ImageConfig) error {
	archive := n.path("image-" + strconv.FormatInt(time.Now().UnixNano(), 36) + ".tar")
	defer os.Remove(archive)
	if err := WriteOCIArchive(archive, ref, root, cfg); err != nil {
		return err
	}
	return n.ctr(ctx, nil, "images", "import", "--snapshotter", "overlayfs", archive)
}

func (n *Node) startKubelet(ctx context.Context) error {
	kubeconfig, _, err := n.c.UserKubeconfig("system:node:"+n.Name, "system:nodes")
	if err != nil {
		return err
	}
	cert, key, err := n.c.ServingCert("kubelet-"+n.Name, n.Gateway.String())
	if err != nil {
		return err
	}
	ports, err := freePorts(1)
	if err != nil {
		return err
	}
	conf := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This machine may run cgroup v1 (hybrid); kubelet 1.35+ refuses it by default.
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://%s
address: %s
port: %d
readOnlyPort: 0
healthzPort: 0
tlsCertFile: %s
tlsPrivateKeyFile: %s
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: %s}
authorization: {mode: AlwaysAllow}
failSwapOn: false
enableControllerAttachDetach: false
# No kube-controller-manager: no attach/detach, no node lifecycle.
registerNode: true
# The test machine's disk and memory are shared: never evict or collect.
evictionHard: {memory.available: "0%%", nodefs.available: "0%%", imagefs.available: "0%%", nodefs.inodesFree: "0%%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
maxPods: 32
podPidsLimit: 4096
resolvConf: /etc/resolv.conf
containerLogMaxSize: 1Mi
`, n.Socket, n.Gateway, ports[0], cert, key, n.c.CAFile)
	if err := os.WriteFile(n.path("kubelet.yaml"), []byte(conf), 0o600); err != nil {
		return fmt.Errorf("kubetest: %w", err)
	}
	p, err := startProc(n.path("logs"), "kubelet", filepath.Join(n.c.ToolsDir, "kubelet"), []string{
		"--config=" + n.path("kubelet.yaml"),
		"--kubeconfig=" + kubeconfig,
		"--root-dir=" + n.path("kubelet"),
		"--cert-dir=" + n.path("kubelet", "pki"),
		"--hostname-override=" + n.Name,
		"--node-ip=" + n.Gateway.String(),
		"--v=2",
	}, nil)
	if err != nil {
		return err
	}
	n.procs = append(n.procs, p)
	return p.waitFor(150*time.Second, "Ready", func() error {
		node, err := n.c.Clientset.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cd := range node.Status.Conditions {
			if cd.Type == corev1.NodeReady {
				if cd.Status == corev1.ConditionTrue {
					return nil
				}
				return fmt.Errorf("Ready %s: %s", cd.Status, cd.Message)
			}
		}
		return errors.New("no Ready condition yet")
	})
}

// Log is the tail of the node's "containerd" or "kubelet" log.
func (n *Node) Log(name string, lines int) string {
	for _, p := range n.procs {
		if p.name == name {
			return p.tail(lines)
		}
	}
	return ""
}

// Close stops kubelet, every pod's containers and containerd, and removes
// what they made: mounts and network namespaces under Dir, the bridge, the
// CNI cache entries, kubelet's cgroups and iptables chains, Dir itself;
// and puts back the sysctls kubelet set. It then looks for each of those
// (and for shims still running) and returns what it could not remove or
// found: empty when the machine is as before.
func (n *Node) Close() []string {
	var left []string
	dir, bridge, socket := n.Dir, n.Bridge, n.Socket
	// kubelet first, so nothing restarts what is stopped next.
	for i := len(n.procs) - 1; i >= 0; i-- {
		if n.procs[i].name != "kubelet" {
			continue
		}
		n.procs[i].stop(10 * time.Second)
	}
	var ctrd *proc
	for _, p := range n.procs {
		if p.name == "containerd" {
			ctrd = p
		}
	}
	if ctrd != nil {
		if done, _ := ctrd.exited(); !done {
			n.removeContainers()
		}
		ctrd.stop(10 * time.Second)
	}
	n.procs = nil
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Shims outlive containerd: any still serving this node's containerd.
	for _, pid := range n.shims() {
		_ = syscallKill(pid)
		left = append(left, fmt.Sprintf("shim %d still ran (killed)", pid))
	}
	if n.Dir != "" {
		for _, m := range mountsUnder(n.Dir) {
			if err := unmount(m); err != nil {
				left = append(left, fmt.Sprintf("mount %s: %v", m, err))
			}
		}
	}
	if n.Bridge != "" {
		if _, err := net.InterfaceByName(n.Bridge); err == nil {
			if err := run(ctx, "ip", "link", "del", n.Bridge); err != nil {
				left = append(left, err.Error())
			}
		}
	}
	// Veths whose pod namespaces were killed go with them; the CNI's
	// result cache (go-cni keeps it in /var/lib/cni) is named after the
	// network.
	if n.network != "" {
		ents, _ := filepath.Glob(filepath.Join("/var/lib/cni/results", n.network+"-*"))
		for _, e := range ents {
			_ = os.Remove(e)
		}
	}
	if n.chainsNew {
		left = append(left, removeKubeletChains(ctx)...)
	}
	if n.cgroupsNew {
		left = append(left, removeKubepods()...)
	}
	for k, v := range n.sysctls {
		_ = os.WriteFile("/proc/sys/"+k, []byte(v), 0o644)
	}
	n.sysctls = nil
	if n.Dir != "" {
		if err := os.RemoveAll(n.Dir); err != nil {
			left = append(left, err.Error())
		}
		n.Dir = ""
	}
	n.Bridge, n.network = "", ""
	// Checked while the machine-wide lock is still held: nothing of
	// another node can be mistaken for this one's.
	if dir != "" {
		left = append(left, n.leftovers(dir, bridge, socket)...)
	}
	if n.lock != nil {
		n.lock.Close() // releases the flock
		n.lock = nil
	}
	return left
}

// removeContainers kills and deletes every container left in the CRI's
// namespace (pods kubelet had no time to stop), so their shims exit and
// unmount their root filesystems.
func (n *Node) removeContainers() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out []byte
	if err := n.ctr(ctx, &out, "tasks", "ls", "-q"); err == nil {
		for _, id := range strings.Fields(string(out)) {
			_ = n.ctr(ctx, nil, "tasks", "delete", "--force", id)
		}
	}
	if err := n.ctr(ctx, &out, "containers", "ls", "-q"); err == nil {
		for _, id := range strings.Fields(string(out)) {
			_ = n.ctr(ctx, nil, "containers", "delete", id)
		}
	}
}

// shims are the pids of containerd-shim-runc-v2 processes serving this
// node's containerd (their command line names its socket).
func (n *Node) shims() []int {
	if n.Socket == "" {
		return nil
	}
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) > 0 && strings.HasSuffix(args[0], "containerd-shim-runc-v2") && strings.Contains(string(b), n.Socket) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// mountsUnder lists mount points below dir, deepest first.
func mountsUnder(dir string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var ms []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) > 4 && (fs[4] == dir || strings.HasPrefix(fs[4], dir+"/")) {
			ms = append(ms, fs[4])
		}
	}
	sort.Slice(ms, func(i, j int) bool { return len(ms[i]) > len(ms[j]) })
	return ms
}

// leftovers lists what of a node is still on the machine: its dir,
// mounts under it, its bridge, shims of its containerd, kubepods cgroups,
// kubelet's iptables chains.
func (n *Node) leftovers(dir, bridge, socket string) []string {
	var left []string
	if _, err := os.Stat(dir); err == nil {
		left = append(left, "dir "+dir)
	}
	if ms := mountsUnder(dir); len(ms) > 0 {
		left = append(left, fmt.Sprintf("mounts %v", ms))
	}
	if _, err := net.InterfaceByName(bridge); err == nil {
		left = append(left, "bridge "+bridge)
	}
	saved := n.Socket
	n.Socket = socket
	if s := n.shims(); len(s) > 0 {
		left = append(left, fmt.Sprintf("shims %v", s))
	}
	n.Socket = saved
	for _, h := range cgroupHierarchies() {
		if _, err := os.Stat(filepath.Join(h, "kubepods")); err == nil {
			left = append(left, "cgroup "+filepath.Join(h, "kubepods"))
		}
	}
	for _, ipt := range []string{"iptables", "ip6tables"} {
		for table, chains := range kubeletChains {
			for _, ch := range chains {
				if out, _ := exec.Command(ipt, "-t", table, "-S", ch).CombinedOutput(); strings.HasPrefix(string(out), "-N ") {
					left = append(left, fmt.Sprintf("%s %s chain %s", ipt, table, ch))
				}
			}
		}
	}
	return left
}
