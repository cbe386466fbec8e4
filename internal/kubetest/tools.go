package kubetest

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ErrNoTools is returned by New when the control plane's binaries are not
// built (scripts/k8s-tools.sh, `make k8s-tools`).
var ErrNoTools = errors.New("kubetest: the Kubernetes test tools are not built (run `make k8s-tools`)")

// toolNames are the control plane's binaries scripts/k8s-tools.sh builds.
var toolNames = []string{"etcd", "kube-apiserver", "kube-scheduler", "agent-sandbox-controller"}

// nodeToolNames are the real node's (StartNode), built by the same script.
var nodeToolNames = []string{"kubelet", "containerd", "containerd-shim-runc-v2", "ctr", "runc", "pause", "cni/bridge", "cni/host-local", "cni/loopback"}

// ToolsDir is the directory scripts/k8s-tools.sh builds the tools into:
// AGENTBOX_K8S_TOOLS when set, otherwise the script's own key computed from
// this checkout's tools/k8s modules under AGENTBOX_TEST_CACHE (default
// ~/.cache/agentbox-test). It does not check that the tools are there.
func ToolsDir() (string, error) {
	if d := os.Getenv("AGENTBOX_K8S_TOOLS"); d != "" {
		return d, nil
	}
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	kmod := filepath.Join(root, "tools", "k8s", "kubernetes")
	amod := filepath.Join(root, "tools", "k8s", "agent-sandbox")
	nmod := filepath.Join(root, "tools", "k8s", "node")
	k8s, err := modVersion(kmod, "k8s.io/kubernetes")
	if err != nil {
		return "", err
	}
	etcd, err := modVersion(kmod, "go.etcd.io/etcd/server/v3")
	if err != nil {
		return "", err
	}
	sandbox, err := modVersion(amod, "sigs.k8s.io/agent-sandbox")
	if err != nil {
		return "", err
	}
	containerd, err := modVersion(nmod, "github.com/containerd/containerd/v2")
	if err != nil {
		return "", err
	}
	// The same bytes in the same order as the script's
	// `cat go.mod go.sum go.mod go.sum go.mod go.sum pause/main.go | sha256sum`.
	h := sha256.New()
	for _, f := range []string{
		filepath.Join(kmod, "go.mod"), filepath.Join(kmod, "go.sum"),
		filepath.Join(amod, "go.mod"), filepath.Join(amod, "go.sum"),
		filepath.Join(nmod, "go.mod"), filepath.Join(nmod, "go.sum"),
		filepath.Join(nmod, "pause", "main.go"),
	} {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("kubetest: %w", err)
		}
		h.Write(b)
	}
	key := fmt.Sprintf("kubernetes-%s-etcd-%s-agent-sandbox-%s-containerd-%s-%s", k8s, etcd, sandbox, containerd, hex.EncodeToString(h.Sum(nil))[:12])
	return filepath.Join(cacheDir(), "k8s-tools", key), nil
}

// toolsPresent reports whether dir holds every control-plane tool and the
// CRDs.
func toolsPresent(dir string) bool {
	fi, err := os.Stat(filepath.Join(dir, "crds"))
	return executables(dir, toolNames) && err == nil && fi.IsDir()
}

// nodeToolsPresent reports whether dir holds every tool of the real node.
func nodeToolsPresent(dir string) bool { return executables(dir, nodeToolNames) }

func executables(dir string, names []string) bool {
	for _, n := range names {
		if fi, err := os.Stat(filepath.Join(dir, n)); err != nil || fi.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

// cacheDir mirrors scripts/test.sh's AGENTBOX_TEST_CACHE default.
func cacheDir() string {
	if d := os.Getenv("AGENTBOX_TEST_CACHE"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "agentbox-test")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "agentbox-test")
}

// repoRoot walks up from the working directory (a test runs in its
// package's directory) to the checkout that holds tools/k8s.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("kubetest: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "tools", "k8s", "kubernetes", "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("kubetest: no tools/k8s above the working directory; set AGENTBOX_K8S_TOOLS")
		}
		dir = parent
	}
}

// modVersion reads the version a go.mod requires of mod, on a
// `require mod v` line or inside a require block — the script's awk rule.
func modVersion(moddir, mod string) (string, error) {
	b, err := os.ReadFile(filepath.Join(moddir, "go.mod"))
	if err != nil {
		return "", fmt.Errorf("kubetest: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) >= 2 && f[0] == mod && strings.HasPrefix(f[1], "v"):
			return f[1], nil
		case len(f) >= 3 && f[0] == "require" && f[1] == mod:
			return f[2], nil
		}
	}
	return "", fmt.Errorf("kubetest: %s/go.mod does not require %s", moddir, mod)
}
