package doctor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeHost is a host tree in a temporary directory with everything agentbox
// needs: a cgroup v2 host on Linux 6.1 with every controller, favordynmods
// on, user namespaces, accounts clear of the sandbox id ranges, overlayfs,
// loop devices, seccomp, nftables, the agent next to the binary, a data
// dir on ext4 with room and every built-in template, Docker, Kubernetes and
// a recent Node.js.
type fakeHost struct {
	root  string
	host  *Host
	opts  Options
	tools map[string]bool // programs LookPath finds
	node  string          // what node --version prints
}

const fakeMountinfo = `22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw
25 22 0:5 / /dev rw,nosuid shared:2 - devtmpfs udev rw,size=1000k,mode=755
26 22 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw
30 22 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot,favordynmods
`

func newFakeHost(t *testing.T) *fakeHost {
	t.Helper()
	f := &fakeHost{root: t.TempDir(), tools: map[string]bool{"mkfs.ext4": true, "node": true, "nft": true}, node: "v22.12.0\n"}
	if err := os.Chmod(f.root, 0o755); err != nil {
		t.Fatal(err)
	}
	for p, content := range map[string]string{
		"proc/sys/kernel/osrelease":         "6.1.0-18-amd64\n",
		"proc/self/mountinfo":               fakeMountinfo,
		"proc/self/status":                  "Name:\tagentbox\nUmask:\t0022\nSeccomp:\t0\nSeccomp_filters:\t0\n",
		"proc/filesystems":                  "nodev\tsysfs\nnodev\ttmpfs\nnodev\tcgroup2\n\text4\nnodev\toverlay\n",
		"proc/sys/user/max_user_namespaces": "15000\n",
		"sys/fs/cgroup/cgroup.controllers":  "cpuset cpu io memory hugetlb pids rdma misc\n",
		"etc/passwd":                        "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\nalice:x:1000:1000::/home/alice:/bin/bash\n",
		"etc/group":                         "root:x:0:\nalice:x:1000:\n",
		"etc/subuid":                        "alice:100000:65536\n",
		"etc/subgid":                        "alice:100000:65536\n",
		"dev/loop-control":                  "",
		"usr/local/bin/agentbox":            "",
		"usr/local/bin/agentbox-agent":      "",
		"var/lib/agentbox/templates/templates.json": `{"version":1,"templates":[{"name":"base","tag":"latest"},{"name":"browser","tag":"latest"},` +
			`{"name":"code-interpreter","tag":"latest"},{"name":"desktop","tag":"latest"},{"name":"debian","tag":"bookworm"}]}`,
	} {
		f.write(t, p, content)
	}
	f.host = &Host{
		Root: f.root,
		Euid: 0,
		LookPath: func(name string) (string, error) {
			if f.tools[name] {
				return "/usr/bin/" + name, nil
			}
			return "", errors.New(`exec: "` + name + `": executable file not found in $PATH`)
		},
		Output: func(_ context.Context, name string, args ...string) ([]byte, error) {
			if name == "node" && len(args) == 1 && args[0] == "--version" {
				return []byte(f.node), nil
			}
			return nil, errors.New("unexpected command " + name)
		},
		Executable: func() (string, error) { return "/usr/local/bin/agentbox", nil },
		DiskFree:   func(string) (uint64, error) { return 100 << 30, nil },
		Seccomp:    func() (string, error) { return "2.5.4 (API level 6)", nil },
		NFTables:   func(context.Context) error { return nil },
		Docker:     func(context.Context, string) error { return nil },
		Kube:       func(context.Context, string) error { return nil },
	}
	f.opts = Options{
		DataDir: "/var/lib/agentbox", DiskReserve: 1 << 30, DefaultDisk: 1 << 30,
		FavorDynmods: true, Network: "on",
		DockerEnabled: true, KubeEnabled: true, Kubeconfig: "/etc/agentbox/kubeconfig",
		Host: f.host,
	}
	return f
}

// write creates the file p (relative to the fake root) with content.
func (f *fakeHost) write(t *testing.T, p, content string) {
	t.Helper()
	full := filepath.Join(f.root, p)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (f *fakeHost) remove(t *testing.T, p string) {
	t.Helper()
	if err := os.RemoveAll(filepath.Join(f.root, p)); err != nil {
		t.Fatal(err)
	}
}

func (f *fakeHost) appendTo(t *testing.T, p, line string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(f.root, p))
	if err != nil {
		t.Fatal(err)
	}
	f.write(t, p, string(b)+line)
}

// replace rewrites the file p with old replaced by new, which must occur.
func (f *fakeHost) replace(t *testing.T, p, old, new string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(f.root, p))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), old) {
		t.Fatalf("%s has no %q", p, old)
	}
	f.write(t, p, strings.Replace(string(b), old, new, 1))
}

func (f *fakeHost) run(t *testing.T) map[string]Result {
	t.Helper()
	out := map[string]Result{}
	for _, r := range Run(context.Background(), f.opts) {
		if _, dup := out[r.Name]; dup {
			t.Fatalf("two checks named %s", r.Name)
		}
		out[r.Name] = r
	}
	return out
}

// kubeUnlinked is Host.Kube of a nokube build.
func kubeUnlinked(context.Context, string) error { return errNoKubeClient }

// allChecks names every check Run makes, in order.
var allChecks = []string{"root", "kernel", "cgroups", "favordynmods", "user-namespaces", "id-ranges",
	"overlayfs", "loop-devices", "mkfs.ext4", "seccomp", "nftables", "agent", "data-dir",
	"docker", "kubernetes", "templates", "nodejs"}

func TestEverythingPresent(t *testing.T) {
	f := newFakeHost(t)
	results := Run(context.Background(), f.opts)
	if len(results) != len(allChecks) {
		t.Fatalf("%d results, want %d", len(results), len(allChecks))
	}
	for i, r := range results {
		if r.Name != allChecks[i] {
			t.Errorf("check %d is %s, want %s", i, r.Name, allChecks[i])
		}
		if r.Status != OK || r.Detail == "" || r.Fix != "" {
			t.Errorf("%s: %s %q fix %q; want ok with a detail and no fix", r.Name, r.Status, r.Detail, r.Fix)
		}
	}
	if err := Required(results); err != nil {
		t.Errorf("Required: %v", err)
	}
	byName := f.run(t)
	for name, want := range map[string]string{
		"kernel":    "Linux 6.1.0-18-amd64",
		"cgroups":   "v2 (unified), controllers cpuset cpu io memory hugetlb pids rdma misc",
		"id-ranges": "host ids 1073741824-2147483647",
		"data-dir":  "/var/lib/agentbox (exists), ext4, 100.0 GiB free",
		"agent":     "/usr/local/bin/agentbox-agent",
		"nodejs":    "Node.js v22.12.0",
	} {
		if !strings.Contains(byName[name].Detail, want) {
			t.Errorf("%s: detail %q lacks %q", name, byName[name].Detail, want)
		}
	}
}

// TestOneRequirementRemoved takes each requirement away from a host that
// has everything and checks that exactly its check turns missing, with its
// fix, and that Required names it.
func TestOneRequirementRemoved(t *testing.T) {
	for _, tc := range []struct {
		name   string
		remove func(t *testing.T, f *fakeHost)
		check  string
		detail string // in the result's detail
		fix    string // in the result's fix
	}{
		{"kernel too old", func(t *testing.T, f *fakeHost) {
			f.write(t, "proc/sys/kernel/osrelease", "5.4.0-150-generic\n")
		}, "kernel", "Linux 5.4.0-150-generic", "5.10 or later"},
		{"no cgroup filesystem", func(t *testing.T, f *fakeHost) {
			f.replace(t, "proc/self/mountinfo", "30 22 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot,favordynmods\n", "")
		}, "cgroups", "no cgroup filesystem", "mount -t cgroup2"},
		{"cgroup v2 without pids", func(t *testing.T, f *fakeHost) {
			f.write(t, "sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory\n")
		}, "cgroups", "missing pids", "CONFIG_CGROUP_PIDS"},
		{"cgroup v2 without memory", func(t *testing.T, f *fakeHost) {
			f.write(t, "sys/fs/cgroup/cgroup.controllers", "cpu io pids\n")
		}, "cgroups", "missing memory", "CONFIG_MEMCG"},
		{"user namespaces off", func(t *testing.T, f *fakeHost) {
			f.write(t, "proc/sys/user/max_user_namespaces", "0\n")
		}, "user-namespaces", "user.max_user_namespaces is 0", "sysctl -w user.max_user_namespaces="},
		{"kernel without user namespaces", func(t *testing.T, f *fakeHost) {
			f.remove(t, "proc/sys/user/max_user_namespaces")
		}, "user-namespaces", "no user namespaces", "CONFIG_USER_NS"},
		{"account in the id range", func(t *testing.T, f *fakeHost) {
			f.appendTo(t, "etc/passwd", "svc:x:1073745000:1000::/:/usr/sbin/nologin\n")
		}, "id-ranges", `passwd entry "svc" has id 1073745000`, "SANDBOX_ID_BASE and SANDBOX_ID_RANGES"},
		{"subordinate ids in the id range", func(t *testing.T, f *fakeHost) {
			f.appendTo(t, "etc/subuid", "bob:1500000000:65536\n")
		}, "id-ranges", `subuid entry "bob"`, "SANDBOX_ID_BASE and SANDBOX_ID_RANGES"},
		{"group in the id range", func(t *testing.T, f *fakeHost) {
			f.appendTo(t, "etc/group", "big:x:2000000000:\n")
		}, "id-ranges", `group entry "big"`, "clear of the host's accounts"},
		{"no overlayfs", func(t *testing.T, f *fakeHost) {
			f.replace(t, "proc/filesystems", "nodev\toverlay\n", "")
		}, "overlayfs", "no overlayfs", "modprobe overlay"},
		{"no loop devices", func(t *testing.T, f *fakeHost) {
			f.remove(t, "dev/loop-control")
		}, "loop-devices", "no /dev/loop-control", "modprobe loop"},
		{"no mkfs.ext4", func(t *testing.T, f *fakeHost) {
			f.tools["mkfs.ext4"] = false
		}, "mkfs.ext4", "not in PATH", "apt install e2fsprogs"},
		{"no libseccomp", func(t *testing.T, f *fakeHost) {
			f.host.Seccomp = func() (string, error) { return "", errors.New("libseccomp.so.2: cannot open shared object file") }
		}, "seccomp", "cannot open shared object", "libseccomp2"},
		{"kernel without seccomp", func(t *testing.T, f *fakeHost) {
			f.write(t, "proc/self/status", "Name:\tagentbox\nUmask:\t0022\n")
		}, "seccomp", "the kernel has no seccomp", "CONFIG_SECCOMP_FILTER"},
		{"no nf_tables with NETWORK=on", func(t *testing.T, f *fakeHost) {
			f.host.NFTables = func(context.Context) error { return errors.New("protocol not supported") }
		}, "nftables", "protocol not supported", "modprobe nf_tables"},
		{"no agent binary", func(t *testing.T, f *fakeHost) {
			f.remove(t, "usr/local/bin/agentbox-agent")
		}, "agent", "no agentbox-agent at /usr/local/bin/agentbox-agent", "make build"},
		{"AGENT_PATH names nothing", func(t *testing.T, f *fakeHost) {
			f.opts.AgentPath = "/opt/agentbox/agentbox-agent"
		}, "agent", "/opt/agentbox/agentbox-agent", "set AGENT_PATH"},
		{"data dir is a file", func(t *testing.T, f *fakeHost) {
			f.remove(t, "var/lib/agentbox")
			f.write(t, "var/lib/agentbox", "oops")
		}, "data-dir", "/var/lib/agentbox is not a directory", "AGENTBOX_DATA_DIR"},
		{"data dir under a file", func(t *testing.T, f *fakeHost) {
			f.opts.DataDir = "/etc/passwd/agentbox"
		}, "data-dir", "not a directory", "AGENTBOX_DATA_DIR"},
		{"data dir parent not searchable", func(t *testing.T, f *fakeHost) {
			if err := os.Chmod(filepath.Join(f.root, "var/lib"), 0o750); err != nil {
				t.Fatal(err)
			}
		}, "data-dir", "others may not search /var/lib", "chmod o+x /var/lib"},
		{"no Docker engine", func(t *testing.T, f *fakeHost) {
			f.opts.DockerHost = "unix:///run/nothing.sock"
			f.host.Docker = func(_ context.Context, host string) error {
				return errors.New("dial unix " + strings.TrimPrefix(host, "unix://") + ": connect: no such file or directory")
			}
		}, "docker", "no Docker engine answers at unix:///run/nothing.sock", "systemctl start docker"},
		{"no Kubernetes API server", func(t *testing.T, f *fakeHost) {
			f.host.Kube = func(_ context.Context, kubeconfig string) error { return errors.New("connection refused") }
		}, "kubernetes", "kubeconfig /etc/agentbox/kubeconfig does not answer: connection refused", "KUBECONFIG_PATH"},
		{"binary without Kubernetes", func(t *testing.T, f *fakeHost) {
			f.host.Kube = kubeUnlinked
		}, "kubernetes", "no Kubernetes client (built with the nokube tag)", "agentbox-kube"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeHost(t)
			tc.remove(t, f)
			results := f.run(t)
			got := results[tc.check]
			if got.Status != Missing || !strings.Contains(got.Detail, tc.detail) || !strings.Contains(got.Fix, tc.fix) {
				t.Errorf("%s: %s %q fix %q\nwant missing, detail ~%q, fix ~%q", tc.check, got.Status, got.Detail, got.Fix, tc.detail, tc.fix)
			}
			for _, r := range results {
				if r.Name != tc.check && r.Status == Missing {
					t.Errorf("%s also missing: %q", r.Name, r.Detail)
				}
			}
			err := Required(Run(context.Background(), f.opts))
			if err == nil || !strings.Contains(err.Error(), "\n  "+tc.check+": ") || !strings.Contains(err.Error(), "fix: "+got.Fix) {
				t.Errorf("Required = %v; want it to name %s and its fix", err, tc.check)
			}
		})
	}
}

// TestOptionalRemoved takes away what agentbox runs without: the check
// warns with a fix and nothing turns missing.
func TestOptionalRemoved(t *testing.T) {
	for _, tc := range []struct {
		name   string
		remove func(t *testing.T, f *fakeHost)
		check  string
		detail string
		fix    string
	}{
		{"no node", func(t *testing.T, f *fakeHost) { f.tools["node"] = false }, "nodejs", "no node in PATH", "Node.js 20.19 or newer"},
		{"old node", func(t *testing.T, f *fakeHost) { f.node = "v18.19.0\n" }, "nodejs", "Node.js v18.19.0", "Node.js 20.19 or newer"},
		{"no templates built", func(t *testing.T, f *fakeHost) {
			f.remove(t, "var/lib/agentbox/templates")
		}, "templates", "no built-in template", "make templates"},
		{"some templates built", func(t *testing.T, f *fakeHost) {
			f.write(t, "var/lib/agentbox/templates/templates.json", `{"version":1,"templates":[{"name":"base","tag":"latest"}]}`)
		}, "templates", "not built: code-interpreter, browser, desktop", "make templates"},
		{"templates in TEMPLATE_DIR", func(t *testing.T, f *fakeHost) {
			f.opts.TemplateDir = "/srv/templates"
		}, "templates", "/srv/templates", "make templates"},
		{"no nf_tables with NETWORK=auto", func(t *testing.T, f *fakeHost) {
			f.opts.Network = "auto"
			f.host.NFTables = func(context.Context) error { return errors.New("protocol not supported") }
		}, "nftables", "loopback only", "modprobe nf_tables"},
		{"kernel without idmapped overlays", func(t *testing.T, f *fakeHost) {
			f.write(t, "proc/sys/kernel/osrelease", "5.15.0-100-generic\n")
		}, "kernel", "image templates need 5.19", "5.19 or later"},
		{"kernel without favordynmods", func(t *testing.T, f *fakeHost) {
			f.write(t, "proc/sys/kernel/osrelease", "5.19.0\n")
			f.replace(t, "proc/self/mountinfo", ",favordynmods", "")
		}, "favordynmods", "has no favordynmods", "6.0"},
		{"data dir on tmpfs", func(t *testing.T, f *fakeHost) {
			f.appendTo(t, "proc/self/mountinfo", "40 22 0:40 / /var/lib/agentbox rw,relatime - tmpfs tmpfs rw,size=1048576k\n")
		}, "data-dir", "lost at reboot", "disk filesystem"},
		{"data dir on overlayfs", func(t *testing.T, f *fakeHost) {
			f.replace(t, "proc/self/mountinfo", "- ext4 /dev/vda1 rw", "- overlay overlay rw,lowerdir=/l,upperdir=/u,workdir=/w")
		}, "data-dir", "on overlayfs", "volume or bind mount"},
		{"data dir short of space", func(t *testing.T, f *fakeHost) {
			f.host.DiskFree = func(string) (uint64, error) { return 1536 << 20, nil }
		}, "data-dir", "1.5 GiB free, less than DISK_RESERVE 1.0 GiB plus DEFAULT_DISK 1.0 GiB", "lower DISK_RESERVE"},
		{"not root", func(t *testing.T, f *fakeHost) {
			f.host.Euid = 1000
			f.opts.Network = "auto"
		}, "root", "runs rootless", "run agentbox as root"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeHost(t)
			tc.remove(t, f)
			results := f.run(t)
			got := results[tc.check]
			if got.Status != Warn || !strings.Contains(got.Detail, tc.detail) || !strings.Contains(got.Fix, tc.fix) {
				t.Errorf("%s: %s %q fix %q\nwant warn, detail ~%q, fix ~%q", tc.check, got.Status, got.Detail, got.Fix, tc.detail, tc.fix)
			}
			if err := Required(Run(context.Background(), f.opts)); err != nil {
				t.Errorf("Required: %v", err)
			}
		})
	}
}

func TestCreatableDataDir(t *testing.T) {
	f := newFakeHost(t)
	f.opts.DataDir = "/var/lib/agentbox/new/state"
	if r := f.run(t)["data-dir"]; r.Status != OK || !strings.Contains(r.Detail, "/var/lib/agentbox/new/state (will be created)") {
		t.Errorf("data-dir: %s %q", r.Status, r.Detail)
	}
}

func TestOverlayModule(t *testing.T) {
	f := newFakeHost(t)
	f.replace(t, "proc/filesystems", "nodev\toverlay\n", "")
	f.write(t, "lib/modules/6.1.0-18-amd64/modules.dep", "kernel/fs/overlayfs/overlay.ko.xz:\nkernel/drivers/block/loop.ko.xz:\n")
	if r := f.run(t)["overlayfs"]; r.Status != OK || !strings.Contains(r.Detail, "module") {
		t.Errorf("overlayfs as a module: %s %q", r.Status, r.Detail)
	}
}

func TestFavorDynmodsSetAtStart(t *testing.T) {
	f := newFakeHost(t)
	f.replace(t, "proc/self/mountinfo", ",favordynmods", "")
	if r := f.run(t)["favordynmods"]; r.Status != OK || !strings.Contains(r.Detail, "the daemon remounts /sys/fs/cgroup with favordynmods") {
		t.Errorf("favordynmods on 6.1: %s %q", r.Status, r.Detail)
	}
	f.opts.FavorDynmods = false
	if r := f.run(t)["favordynmods"]; r.Status != Skip || !strings.Contains(r.Detail, "CGROUP_FAVOR_DYNMODS=false") {
		t.Errorf("favordynmods off: %s %q", r.Status, r.Detail)
	}
}

func TestBackendsOff(t *testing.T) {
	f := newFakeHost(t)
	f.opts.DockerEnabled, f.opts.KubeEnabled, f.opts.Network = false, false, "off"
	broken := func(context.Context) error { return errors.New("must not be asked") }
	f.host.NFTables = broken
	f.host.Docker = func(ctx context.Context, _ string) error { return broken(ctx) }
	f.host.Kube = func(ctx context.Context, _ string) error { return broken(ctx) }
	results := f.run(t)
	for name, detail := range map[string]string{"docker": "DOCKER_BACKEND=false", "kubernetes": "KUBE_BACKEND=false", "nftables": "NETWORK=off"} {
		if r := results[name]; r.Status != Skip || r.Detail != detail && !strings.HasPrefix(r.Detail, detail) {
			t.Errorf("%s: %s %q", name, r.Status, r.Detail)
		}
	}
}

// cgroupV1Mountinfo is a hybrid host like Debian 12 VMs here: v1
// hierarchies with the controllers, and a cgroup2 mount without them.
const cgroupV1Mountinfo = `22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw
30 22 0:26 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
31 30 0:27 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
32 30 0:28 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
33 30 0:29 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
34 30 0:30 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices
35 30 0:31 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
36 30 0:32 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
37 30 0:33 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
38 30 0:34 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,favordynmods
`

func TestCgroupV1(t *testing.T) {
	for _, tc := range []struct {
		name   string
		remove func(t *testing.T, f *fakeHost)
		status Status
		detail string
		fix    string
	}{
		{"everything", func(*testing.T, *fakeHost) {}, OK,
			"v1 (hybrid: cgroup2 at /sys/fs/cgroup/unified too), controllers cpu cpuacct devices freezer memory pids", ""},
		{"no swap accounting", func(t *testing.T, f *fakeHost) {
			f.remove(t, "sys/fs/cgroup/memory/memory.memsw.limit_in_bytes")
		}, Missing, "missing swap accounting", "swapaccount=1"},
		{"no devices controller", func(t *testing.T, f *fakeHost) {
			f.replace(t, "proc/self/mountinfo", "34 30 0:30 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices\n", "")
		}, Missing, "missing devices", "CONFIG_CGROUP_DEVICE"},
		{"no pids controller", func(t *testing.T, f *fakeHost) {
			f.replace(t, "proc/self/mountinfo", "36 30 0:32 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n", "")
		}, Missing, "missing pids", "CONFIG_CGROUP_PIDS"},
		{"no freezer", func(t *testing.T, f *fakeHost) {
			f.replace(t, "proc/self/mountinfo", "35 30 0:31 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer\n", "")
		}, Warn, "cannot be paused", "freezer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeHost(t)
			f.write(t, "proc/self/mountinfo", cgroupV1Mountinfo)
			f.remove(t, "sys/fs/cgroup/cgroup.controllers")
			f.write(t, "sys/fs/cgroup/memory/memory.memsw.limit_in_bytes", "9223372036854771712\n")
			tc.remove(t, f)
			results := f.run(t)
			r := results["cgroups"]
			if r.Status != tc.status || !strings.Contains(r.Detail, tc.detail) || !strings.Contains(r.Fix, tc.fix) {
				t.Errorf("cgroups: %s %q fix %q\nwant %s ~%q fix ~%q", r.Status, r.Detail, r.Fix, tc.status, tc.detail, tc.fix)
			}
			if d := results["favordynmods"]; d.Status != OK || !strings.Contains(d.Detail, "/sys/fs/cgroup/unified") {
				t.Errorf("favordynmods on the hybrid mount: %s %q", d.Status, d.Detail)
			}
		})
	}
}

func TestRootless(t *testing.T) {
	f := newFakeHost(t)
	f.host.Euid = 1000
	f.opts.Network = "auto"
	results := f.run(t)
	for _, name := range []string{"cgroups", "favordynmods", "id-ranges", "loop-devices", "mkfs.ext4", "nftables", "templates"} {
		if results[name].Status != Skip {
			t.Errorf("rootless %s: %s %q; want skip", name, results[name].Status, results[name].Detail)
		}
	}
	if r := results["user-namespaces"]; r.Status != OK || !strings.Contains(r.Detail, "unprivileged creation allowed") {
		t.Errorf("user-namespaces: %s %q", r.Status, r.Detail)
	}

	// What a rootless daemon needs that root does not.
	f.write(t, "proc/sys/kernel/unprivileged_userns_clone", "0\n")
	if r := f.run(t)["user-namespaces"]; r.Status != Missing || !strings.Contains(r.Fix, "kernel.unprivileged_userns_clone=1") {
		t.Errorf("unprivileged_userns_clone=0: %s %q fix %q", r.Status, r.Detail, r.Fix)
	}
	f.host.Euid = 0
	if r := f.run(t)["user-namespaces"]; r.Status != OK {
		t.Errorf("root with unprivileged_userns_clone=0: %s %q; root creates namespaces with its capabilities", r.Status, r.Detail)
	}
	f.host.Euid = 1000
	f.remove(t, "proc/sys/kernel/unprivileged_userns_clone")
	f.write(t, "proc/sys/kernel/apparmor_restrict_unprivileged_userns", "1\n")
	if r := f.run(t)["user-namespaces"]; r.Status != Missing || !strings.Contains(r.Fix, "apparmor_restrict_unprivileged_userns=0") {
		t.Errorf("AppArmor restriction: %s %q fix %q", r.Status, r.Detail, r.Fix)
	}
	f.opts.Network = "on"
	if r := f.run(t)["nftables"]; r.Status != Missing || !strings.Contains(r.Detail, "needs a root daemon") {
		t.Errorf("rootless NETWORK=on: %s %q", r.Status, r.Detail)
	}
}

func TestRequiredNamesEveryMissing(t *testing.T) {
	f := newFakeHost(t)
	f.remove(t, "dev/loop-control")
	f.tools["mkfs.ext4"] = false
	f.tools["node"] = false // a warning: not named
	err := Required(Run(context.Background(), f.opts))
	if err == nil {
		t.Fatal("Required = nil")
	}
	want := "2 host requirements are missing (agentbox doctor shows every check):\n" +
		"  loop-devices: no /dev/loop-control: each sandbox's disk is an ext4 image on a loop device — fix: modprobe loop (and list it in /etc/modules-load.d/); in a container, pass /dev/loop-control and the /dev/loop* devices\n" +
		"  mkfs.ext4: mkfs.ext4 is not in PATH: it formats the sandboxes' disk images — fix: apt install e2fsprogs"
	if err.Error() != want {
		t.Errorf("Required:\n%s\nwant:\n%s", err, want)
	}
}

func TestParseVersion(t *testing.T) {
	for in, want := range map[string]majorMinor{
		"6.18.44-fc-v782": {6, 18}, "5.10.0-28-amd64": {5, 10}, "20.19.2": {20, 19}, "6.1": {6, 1}, "4.19-rc1": {4, 19},
	} {
		if got, err := parseVersion(in); err != nil || got != want {
			t.Errorf("parseVersion(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "6", "x.y", "v20.1"} {
		if _, err := parseVersion(in); err == nil {
			t.Errorf("parseVersion(%q) succeeded", in)
		}
	}
}

// TestThisHost runs the real checks on this machine as root: what the
// native backend's and the network's own tests need must be ok here.
func TestThisHost(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the checks that must pass here are a root daemon's")
	}
	dataDir := t.TempDir()
	// t.TempDir's directories are 0700: sandboxes could not pass through.
	for _, d := range []string{dataDir, filepath.Dir(dataDir)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	opts := Options{DataDir: dataDir, DiskReserve: 1 << 30, DefaultDisk: 1 << 30, FavorDynmods: true, Network: "on",
		AgentPath: os.Getenv("AGENTBOX_AGENT_PATH")}
	results := Run(context.Background(), opts)
	mustBeOK := []string{"root", "kernel", "cgroups", "user-namespaces", "id-ranges", "overlayfs", "loop-devices",
		"mkfs.ext4", "seccomp", "nftables"}
	if opts.AgentPath != "" { // make test builds it and says where
		mustBeOK = append(mustBeOK, "agent")
	}
	byName := map[string]Result{}
	for _, r := range results {
		byName[r.Name] = r
		t.Logf("%-7s %-15s %s", r.Status, r.Name, r.Detail)
	}
	for _, name := range mustBeOK {
		if r := byName[name]; r.Status != OK {
			t.Errorf("%s: %s %q (fix %q); want ok on this host", name, r.Status, r.Detail, r.Fix)
		}
	}
	if r := byName["data-dir"]; r.Status == Missing {
		t.Errorf("data-dir: %q", r.Detail)
	}
	for _, name := range []string{"docker", "kubernetes"} {
		if byName[name].Status != Skip {
			t.Errorf("%s: %s without its backend", name, byName[name].Status)
		}
	}
}
