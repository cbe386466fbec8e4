package native

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/moby/sys/mountinfo"
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
	superOpts  []string // cgroup2 options (nsdelegate, favordynmods, ...)
	mountFlags uintptr  // the per-mount options (nosuid, relatime, ...)
}

// findCgroup2Mount returns the first cgroup2 mount of mountinfo (the
// format of /proc/self/mountinfo).
func findCgroup2Mount(r io.Reader) (cgroup2Mount, error) {
	mounts, err := mountinfo.GetMountsFromReader(r, mountinfo.FSTypeFilter("cgroup2"))
	if err != nil {
		return cgroup2Mount{}, err
	}
	if len(mounts) == 0 {
		return cgroup2Mount{}, errNoCgroup2
	}
	mi := mounts[0]
	m := cgroup2Mount{target: mi.Mountpoint}
	for _, o := range strings.Split(mi.VFSOptions, ",") {
		if o != "rw" && o != "ro" && o != "" {
			m.superOpts = append(m.superOpts, o)
		}
	}
	if m.mountFlags, err = mountFlagsOf(strings.Split(mi.Options, ",")); err != nil {
		return cgroup2Mount{}, fmt.Errorf("cgroup2 mount %s: %w", m.target, err)
	}
	return m, nil
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
