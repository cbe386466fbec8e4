package docker

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/cgroupfs"
	"github.com/agentbox/agentbox/internal/netpolicy"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// cleanLog keeps the printable text of a multiplexed log stream (its
// frame headers are binary).
func cleanLog(b []byte) string {
	return strings.Map(func(r rune) rune {
		if r == '\n' || r >= 0x20 && r < 0x7f {
			return r
		}
		return -1
	}, string(b))
}

// running returns the host pid and cgroup directories of the sandbox's
// agent, noted at boot; a sandbox that is not running is a conflict.
func (b *Backend) running(id sandbox.ID) (int, map[string]string, error) {
	bx, err := b.lookup(id)
	if err != nil {
		return 0, nil, err
	}
	bx.mu.Lock()
	defer bx.mu.Unlock()
	if bx.rec.Stopped || bx.pid == 0 {
		return 0, nil, sandbox.Errorf(sandbox.ClassConflict, "sandbox %s is not running", id)
	}
	return bx.pid, bx.cgroups, nil
}

// cgroupDirs maps each cgroup controller ("" on v2) of pid to its
// directory, read from /proc (the engine must run on this host).
func cgroupDirs(pid int) (map[string]string, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" {
			out[""] = filepath.Join("/sys/fs/cgroup", parts[2])
			continue
		}
		for _, ctrl := range strings.Split(parts[1], ",") {
			out[ctrl] = filepath.Join("/sys/fs/cgroup", ctrl, parts[2])
		}
	}
	return out, sc.Err()
}

// Stats implements backend.StatsReader from the container's cgroup files.
func (b *Backend) Stats(ctx context.Context, id sandbox.ID) (backend.Stats, error) {
	_, p, err := b.running(id)
	if err != nil {
		return backend.Stats{}, err
	}
	var s backend.Stats
	if dir, ok := p[""]; ok && len(p) == 1 {
		s.MemoryBytes = cgroupfs.ReadInt(filepath.Join(dir, "memory.current"))
		s.MemoryMaxBytes = cgroupfs.ReadInt(filepath.Join(dir, "memory.peak"))
		s.MemoryLimit = cgroupfs.ReadInt(filepath.Join(dir, "memory.max"))
		s.OOMKills = cgroupfs.ReadKey(filepath.Join(dir, "memory.events"), "oom_kill")
		s.CPUSeconds = float64(cgroupfs.ReadKey(filepath.Join(dir, "cpu.stat"), "usage_usec")) / 1e6
		s.Pids = cgroupfs.ReadInt(filepath.Join(dir, "pids.current"))
		s.PidsLimit = cgroupfs.ReadInt(filepath.Join(dir, "pids.max"))
		s.PidsLimitHits = cgroupfs.ReadKey(filepath.Join(dir, "pids.events"), "max")
		return s, nil
	}
	mem := p["memory"]
	s.MemoryBytes = cgroupfs.ReadInt(filepath.Join(mem, "memory.usage_in_bytes"))
	s.MemoryMaxBytes = cgroupfs.ReadInt(filepath.Join(mem, "memory.max_usage_in_bytes"))
	s.MemoryLimit = cgroupfs.ReadInt(filepath.Join(mem, "memory.limit_in_bytes"))
	s.OOMKills = cgroupfs.ReadKey(filepath.Join(mem, "memory.oom_control"), "oom_kill")
	s.CPUSeconds = float64(cgroupfs.ReadInt(filepath.Join(p["cpuacct"], "cpuacct.usage"))) / 1e9
	s.Pids = cgroupfs.ReadInt(filepath.Join(p["pids"], "pids.current"))
	s.PidsLimit = cgroupfs.ReadInt(filepath.Join(p["pids"], "pids.max"))
	s.PidsLimitHits = cgroupfs.ReadKey(filepath.Join(p["pids"], "pids.events"), "max")
	return s, nil
}

// LimitCounters implements backend.LimitCounter.
func (b *Backend) LimitCounters(ctx context.Context, id sandbox.ID) (oomKills, pidsLimitHits int64, err error) {
	s, err := b.Stats(ctx, id)
	return s.OOMKills, s.PidsLimitHits, err
}

// DialPort implements backend.PortDialer: it connects to the port from
// inside the container's network namespace, so nothing is published and
// it works in network mode none.
func (b *Backend) DialPort(ctx context.Context, id sandbox.ID, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, sandbox.Errorf(sandbox.ClassInvalid, "port %d out of range", port)
	}
	if bx, err := b.lookup(id); err == nil && bx.rec.Spec.Isolation == sandbox.IsolationGVisor {
		// Its ports are in gVisor's network stack, not the container's
		// namespace.
		return nil, sandbox.Errorf(sandbox.ClassUnavailable, "sandbox %s runs at isolation gvisor, which has no previews of its ports (see GET /v1/info capabilities.gvisor)", id)
	}
	pid, _, err := b.running(id)
	if err != nil {
		return nil, err
	}
	conn, err := netpolicy.DialInNetns(ctx, "/proc/"+strconv.Itoa(pid)+"/ns/net", "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return nil, sandbox.Wrap(sandbox.ClassUnavailable, err, fmt.Sprintf("nothing answers on port %d in sandbox %s", port, id))
	}
	return conn, nil
}
