package native

import (
	"os"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/testutil"
)

func TestFindCgroup2Mount(t *testing.T) {
	const hybrid = `25 30 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
35 25 0:30 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
36 35 0:31 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate
37 35 0:32 / /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,pids
`
	m, err := findCgroup2Mount(strings.NewReader(hybrid))
	if err != nil {
		t.Fatal(err)
	}
	if m.target != "/sys/fs/cgroup/unified" || !slices.Equal(m.superOpts, []string{"nsdelegate"}) ||
		m.mountFlags != unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC|unix.MS_RELATIME {
		t.Fatalf("hybrid: %+v", m)
	}

	const v2 = `30 1 0:27 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot,favordynmods
`
	if m, err = findCgroup2Mount(strings.NewReader(v2)); err != nil || m.target != "/sys/fs/cgroup" ||
		!slices.Equal(m.superOpts, []string{"nsdelegate", "memory_recursiveprot", "favordynmods"}) {
		t.Fatalf("v2: %+v %v", m, err)
	}

	const escaped = `40 1 0:27 / /mnt/my\040cgroups ro,nosuid,nodev - cgroup2 none ro
`
	if m, err = findCgroup2Mount(strings.NewReader(escaped)); err != nil || m.target != "/mnt/my cgroups" ||
		m.mountFlags != unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV || len(m.superOpts) != 0 {
		t.Fatalf("escaped: %+v %v", m, err)
	}

	// A per-mount option a remount could not keep: leave the mount alone.
	const unknown = `40 1 0:27 / /sys/fs/cgroup rw,nosuid,newfancyflag - cgroup2 cgroup2 rw
`
	if _, err = findCgroup2Mount(strings.NewReader(unknown)); err == nil {
		t.Fatal("an unknown mount option was accepted")
	}

	if _, err = findCgroup2Mount(strings.NewReader(strings.SplitAfter(hybrid, "\n")[0])); err != errNoCgroup2 {
		t.Fatalf("no cgroup2 mount: %v", err)
	}
}

// TestFavorDynmods: New leaves the host's cgroup2 mount with favordynmods
// and every option it had; a second call changes nothing.
func TestFavorDynmods(t *testing.T) {
	testutil.RequireRoot(t)
	read := func() cgroup2Mount {
		t.Helper()
		f, err := os.Open("/proc/self/mountinfo")
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		m, err := findCgroup2Mount(f)
		if err == errNoCgroup2 {
			t.Skip("this host has no cgroup2 mount")
		}
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	before := read()
	newTestBackend(t, testutil.ShortTempDir(t))
	after := read()
	if !slices.Contains(after.superOpts, "favordynmods") {
		t.Fatalf("cgroup2 options after New: %v", after.superOpts)
	}
	for _, o := range before.superOpts {
		if !slices.Contains(after.superOpts, o) {
			t.Errorf("option %q of the cgroup2 mount was lost: %v -> %v", o, before.superOpts, after.superOpts)
		}
	}
	if after.mountFlags != before.mountFlags || after.target != before.target {
		t.Errorf("mount changed: %+v -> %+v", before, after)
	}
	if changed, err := favorDynmods(); changed || err != nil {
		t.Fatalf("second call: changed %v, %v", changed, err)
	}
}
