package doctor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/google/nftables"
	"github.com/moby/moby/client"
	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/backend/native"
)

// Host is the machine the checks look at. Files are read below Root: the
// checks read Root/proc/self/mountinfo, Root/proc/sys/..., Root/sys/fs/cgroup,
// Root/etc/passwd, Root/dev/loop-control, Root/lib/modules and the data dir
// under Root. What is not a file is asked through the functions; a nil
// function makes its check report that it cannot tell.
type Host struct {
	// Root is "/" on a real host, a temporary tree in tests.
	Root string
	// Euid is the effective uid agentbox runs with (0: root).
	Euid int
	// LookPath finds a program in PATH (exec.LookPath).
	LookPath func(name string) (string, error)
	// Output runs a program and returns its standard output.
	Output func(ctx context.Context, name string, args ...string) ([]byte, error)
	// Executable is the path of the agentbox binary (the agent is looked
	// for next to it), under Root.
	Executable func() (string, error)
	// DiskFree returns the bytes available to agentbox (root) on the
	// filesystem of dir, a directory under Root that exists.
	DiskFree func(dir string) (uint64, error)
	// Seccomp returns the version of the libseccomp linked into agentbox.
	Seccomp func() (string, error)
	// NFTables asks the kernel's nf_tables over netlink for its tables.
	NFTables func(ctx context.Context) error
	// Docker pings the Docker engine at host ("" = DOCKER_HOST or the
	// default socket).
	Docker func(ctx context.Context, host string) error
	// Kube reaches the API server of kubeconfig ("" = in-cluster).
	Kube func(ctx context.Context, kubeconfig string) error
}

// errNoKubeClient is Host.Kube's answer in a build without Kubernetes
// support (the nokube tag).
var errNoKubeClient = errors.New("this build has no Kubernetes client")

// path returns the host path p under Root.
func (h *Host) path(p string) string { return filepath.Join(h.Root, p) }

// probeTimeout bounds each probe that talks to something (an engine, an
// API server, a program).
const probeTimeout = 5 * time.Second

// RealHost returns this machine.
func RealHost() *Host {
	return &Host{
		Root:     "/",
		Euid:     os.Geteuid(),
		LookPath: exec.LookPath,
		Output: func(ctx context.Context, name string, args ...string) ([]byte, error) {
			return exec.CommandContext(ctx, name, args...).Output()
		},
		Executable: native.Executable,
		DiskFree: func(dir string) (uint64, error) {
			var st unix.Statfs_t
			if err := unix.Statfs(dir, &st); err != nil {
				return 0, err
			}
			return st.Bavail * uint64(st.Bsize), nil
		},
		Seccomp:  seccompVersion,
		NFTables: listNFTables,
		Docker:   pingDocker,
		Kube:     kubeReachable, // kube.go; in nokube builds a refusal
	}
}

// seccompVersion is the libseccomp this binary runs with (linked with cgo:
// the native backend compiles its profile with it).
func seccompVersion() (string, error) {
	major, minor, micro := libseccomp.GetLibraryVersion()
	if major == 0 && minor == 0 && micro == 0 {
		return "", errors.New("libseccomp reports no version")
	}
	api, err := libseccomp.GetAPI()
	if err != nil {
		return "", fmt.Errorf("libseccomp %d.%d.%d: %w", major, minor, micro, err)
	}
	return fmt.Sprintf("%d.%d.%d (API level %d)", major, minor, micro, api), nil
}

// listNFTables lists the kernel's nftables tables, as the network manager
// does when it builds its own (it needs CAP_NET_ADMIN).
func listNFTables(context.Context) error {
	conn, err := nftables.New() // not lasting: a socket per request
	if err != nil {
		return err
	}
	_, err = conn.ListTables()
	return err
}

// pingDocker pings the engine as the Docker backend connects to it.
func pingDocker(ctx context.Context, host string) error {
	opts := []client.Opt{client.FromEnv}
	if host != "" {
		opts = append(opts, client.WithHost(host))
	}
	api, err := client.New(opts...)
	if err != nil {
		return err
	}
	defer api.Close()
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	_, err = api.Ping(ctx, client.PingOptions{})
	return err
}
