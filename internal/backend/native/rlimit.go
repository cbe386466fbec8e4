package native

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// Open-file limits of sandbox processes. Every process of a sandbox may
// hold up to the hard limit of open files, so pids × hard is what one
// sandbox can take from the host's file table (fs.file-max), which all
// sandboxes and the host share.
const (
	DefaultNofileSoft = 1024
	DefaultNofileHard = 4096
	// nofileShareOfFileMax: one sandbox may hold at most 1/4 of the host's
	// file table, however many processes it runs.
	nofileShareOfFileMax = 4
	// minNofile keeps ordinary programs working on hosts with a tiny file
	// table or sandboxes with a huge pids limit.
	minNofile = 64
)

// clampNofile returns the soft and hard RLIMIT_NOFILE for a sandbox with
// the given pids limit: the configured values, lowered so that pids × hard
// stays within the sandbox's share of fileMax (never below minNofile), and
// soft never above hard.
func clampNofile(soft, hard, fileMax, pids uint64) (uint64, uint64) {
	if pids > 0 {
		if budget := fileMax / nofileShareOfFileMax / pids; budget < hard {
			hard = budget
		}
	}
	hard = max(hard, minNofile)
	return min(soft, hard), hard
}

// hostFileMax reads fs.file-max, the size of the host's file table.
func hostFileMax() (uint64, error) {
	data, err := os.ReadFile("/proc/sys/fs/file-max")
	if err != nil {
		return 0, fmt.Errorf("read fs.file-max: %w", err)
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse fs.file-max %q: %w", data, err)
	}
	return n, nil
}

// nofileLimit is the RLIMIT_NOFILE of a sandbox with the given pids limit.
// A rootless daemon cannot raise a hard limit, so its own hard limit caps
// the sandbox's too.
func (b *Backend) nofileLimit(pids int64) (soft, hard uint64) {
	soft, hard = clampNofile(b.cfg.NofileSoft, b.cfg.NofileHard, b.fileMax, uint64(max(pids, 1)))
	if b.rootless {
		var own unix.Rlimit
		if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &own); err == nil && own.Max < hard {
			hard = own.Max
			soft = min(soft, hard)
		}
	}
	return soft, hard
}

// sandboxRlimits are the resource limits of a sandbox's processes.
// RLIMIT_CORE is 0: a crashing program must not write memory images of
// itself into the workspace.
func (b *Backend) sandboxRlimits(pids int64) []specs.POSIXRlimit {
	soft, hard := b.nofileLimit(pids)
	return []specs.POSIXRlimit{
		{Type: "RLIMIT_NOFILE", Hard: hard, Soft: soft},
		{Type: "RLIMIT_CORE", Hard: 0, Soft: 0},
	}
}

// rlimitsFlag renders limits for the agent's --rlimits flag. The agent
// sets them on itself before it starts anything (lowering a limit needs no
// privilege, inside any user namespace), so every sandbox process,
// including the exec shims it starts ahead of need, inherits them.
func rlimitsFlag(limits []specs.POSIXRlimit) string {
	names := map[string]string{"RLIMIT_NOFILE": "nofile", "RLIMIT_CORE": "core"}
	parts := make([]string, 0, len(limits))
	for _, r := range limits {
		parts = append(parts, fmt.Sprintf("%s=%d:%d", names[r.Type], r.Soft, r.Hard))
	}
	return strings.Join(parts, ",")
}
