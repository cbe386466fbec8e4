package kubetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// nodeLockPath is the machine-wide lock of the one real node.
const nodeLockPath = "/run/agentbox-kubetest-node.lock"

// lockNode takes the machine-wide node lock, waiting while another test's
// node holds it (until ctx ends).
func lockNode(ctx context.Context) (*os.File, error) {
	f, err := os.OpenFile(nodeLockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("kubetest: node lock: %w", err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("kubetest: node lock: %w", err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("kubetest: waiting for another test's real node to stop: %w", ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func syscallKill(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }

func unmount(path string) error {
	if err := syscall.Unmount(path, 0); err != nil {
		return syscall.Unmount(path, syscall.MNT_DETACH)
	}
	return nil
}

// cgroupHierarchies are the cgroup mount points kubelet makes kubepods
// in: every v1 controller's and the unified one (v2 or hybrid).
func cgroupHierarchies() []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var hs []string
	for _, line := range strings.Split(string(b), "\n") {
		// ... mountpoint ... - fstype source opts
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		f, p := strings.Fields(pre), strings.Fields(post)
		if len(f) > 4 && len(p) > 0 && (p[0] == "cgroup" || p[0] == "cgroup2") {
			hs = append(hs, f[4])
		}
	}
	return hs
}

// removeKubepods removes the kubepods cgroup tree kubelet made in every
// hierarchy, deepest first (a cgroup goes only once its children and
// tasks have).
func removeKubepods() []string {
	var left []string
	for _, h := range cgroupHierarchies() {
		for _, top := range []string{"kubepods", "kubepods.slice"} {
			root := filepath.Join(h, top)
			if _, err := os.Stat(root); err != nil {
				continue
			}
			var dirs []string
			_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					dirs = append(dirs, p)
				}
				return nil
			})
			sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
			for _, d := range dirs {
				if err := syscall.Rmdir(d); err != nil {
					left = append(left, fmt.Sprintf("cgroup %s: %v", d, err))
				}
			}
		}
	}
	return left
}

// removeKubeletChains deletes the jumps into kubelet's iptables chains and
// the chains, for IPv4 and IPv6.
func removeKubeletChains(ctx context.Context) []string {
	var left []string
	for _, ipt := range []string{"iptables", "ip6tables"} {
		if _, err := exec.LookPath(ipt); err != nil {
			continue
		}
		for table, chains := range kubeletChains {
			out, err := exec.CommandContext(ctx, ipt, "-t", table, "-S").Output()
			if err != nil {
				continue
			}
			// Rules that jump to one of the chains, from any chain.
			for _, rule := range strings.Split(string(out), "\n") {
				f := strings.Fields(rule)
				if len(f) < 2 || f[0] != "-A" {
					continue
				}
				for _, ch := range chains {
					if strings.Contains(rule, "-j "+ch) && f[1] != ch {
						args := append([]string{"-t", table, "-D"}, f[1:]...)
						if err := run(ctx, ipt, args...); err != nil {
							left = append(left, err.Error())
						}
					}
				}
			}
			for _, ch := range chains {
				if out, _ := exec.CommandContext(ctx, ipt, "-t", table, "-S", ch).CombinedOutput(); !strings.HasPrefix(string(out), "-N ") {
					continue
				}
				_ = run(ctx, ipt, "-t", table, "-F", ch)
				if err := run(ctx, ipt, "-t", table, "-X", ch); err != nil {
					left = append(left, err.Error())
				}
			}
		}
	}
	return left
}
