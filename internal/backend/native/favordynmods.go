package native

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Moving a process into a cgroup (what starting every sandbox's init does,
// once per hierarchy) takes the kernel's global cgroup_threadgroup_rwsem
// for writing. That percpu rwsem keeps readers (every fork, exit and exec
// on the host) on a fast path, and the price is paid by the writer: unless
// another move happened within the last couple of RCU grace periods, it
// waits for one. Measured here (2 vCPUs, HZ=250): 7.8 ms per move, about a
// quarter of a sandbox's create.
//
// The cgroup2 mount option favordynmods (Linux 6.0+) keeps the rwsem on its
// slow path for good: moves no longer wait, forks and exits take a shared
// atomic instead of a per-CPU counter. The kernel documents it for exactly
// this workload ("dynamic cgroup modifications such as task migrations"),
// and the flag is global, so remounting whichever cgroup2 mount the host
// has (/sys/fs/cgroup on a v2 host, /sys/fs/cgroup/unified on a hybrid
// one) helps the v1 hierarchies too. It stays on until reboot (newer
// kernels refuse to turn it off once used); CGROUP_FAVOR_DYNMODS=false
// leaves the host as it is.

// cgroup2Mount describes the host's cgroup2 mount.
type cgroup2Mount struct {
	target     string
	mountOpts  []string // per-mount options (rw, nosuid, relatime, ...)
	superOpts  []string // cgroup2 options (nsdelegate, favordynmods, ...)
	mountFlags uintptr
}

// findCgroup2Mount returns the first cgroup2 mount of mountinfo.
func findCgroup2Mount(mountinfo io.Reader) (cgroup2Mount, error) {
	sc := bufio.NewScanner(mountinfo)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent dev root target mountopts [optional...] - fstype source superopts
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 6 || len(g) < 3 || g[0] != "cgroup2" {
			continue
		}
		m := cgroup2Mount{target: unescapeMountPath(f[4]), mountOpts: strings.Split(f[5], ",")}
		for _, o := range strings.Split(g[2], ",") {
			if o != "rw" && o != "ro" {
				m.superOpts = append(m.superOpts, o)
			}
		}
		flags, err := mountFlagsOf(m.mountOpts)
		if err != nil {
			return cgroup2Mount{}, fmt.Errorf("cgroup2 mount %s: %w", m.target, err)
		}
		m.mountFlags = flags
		return m, nil
	}
	if err := sc.Err(); err != nil {
		return cgroup2Mount{}, err
	}
	return cgroup2Mount{}, errNoCgroup2
}

var errNoCgroup2 = errors.New("no cgroup2 mount")

// mountFlagsOf turns per-mount options into the flags a remount must pass
// to keep them.
func mountFlagsOf(opts []string) (uintptr, error) {
	var flags uintptr
	for _, o := range opts {
		switch o {
		case "rw":
		case "ro":
			flags |= unix.MS_RDONLY
		case "nosuid":
			flags |= unix.MS_NOSUID
		case "nodev":
			flags |= unix.MS_NODEV
		case "noexec":
			flags |= unix.MS_NOEXEC
		case "relatime":
			flags |= unix.MS_RELATIME
		case "noatime":
			flags |= unix.MS_NOATIME
		case "nodiratime":
			flags |= unix.MS_NODIRATIME
		case "strictatime":
			flags |= unix.MS_STRICTATIME
		case "nosymfollow":
			flags |= unix.MS_NOSYMFOLLOW
		default:
			// A flag this code does not know would be dropped by the
			// remount: leave the mount alone.
			return 0, fmt.Errorf("unknown mount option %q", o)
		}
	}
	return flags, nil
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var c byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &c); err == nil {
				b.WriteByte(c)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// favorDynmods remounts the host's cgroup2 mount with favordynmods, keeping
// every other option. It reports whether it changed anything; a host
// without a cgroup2 mount is left as it is (errNoCgroup2).
func favorDynmods() (bool, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	m, err := findCgroup2Mount(f)
	f.Close()
	if err != nil {
		return false, err
	}
	if slices.Contains(m.superOpts, "favordynmods") {
		return false, nil
	}
	data := strings.Join(append(slices.Clone(m.superOpts), "favordynmods"), ",")
	if err := unix.Mount("", m.target, "", unix.MS_REMOUNT|m.mountFlags, data); err != nil {
		return false, fmt.Errorf("remount %s with %s: %w", m.target, data, err)
	}
	return true, nil
}
