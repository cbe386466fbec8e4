package native

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// gVisor sandboxes (isolation "gvisor") are the same sandbox as a
// container one — the same disk, root filesystem, /etc, workspace, cgroup
// path and network namespace, the same agent as PID 1 behind the same
// host socket — started by runsc instead of libcontainer: the sandbox's
// processes make their system calls to gVisor's kernel (the Sentry, with
// the systrap platform: no hardware virtualisation needed), which runs
// in the sandbox's namespaces and cgroups under a seccomp filter of its
// own. What the container level does with host kernel features inside
// the sandbox (a user namespace per sandbox, idmapped image layers (a
// gVisor sandbox mounts them with their stored ids, see image.go), the
// cgroup freezer on the agent's processes, /proc/PID/ns/net for
// previews) does not reach through gVisor's kernel: Capabilities.GVisor
// lists what such a sandbox lacks, and the backend refuses it.

// agentRunInSandbox is where a gVisor sandbox's agent listens: a
// directory bind-mounted from the sandbox's host run directory (root's,
// 0700: the sandbox user cannot enter it), in which runsc (--host-uds
// create) creates the agent's socket as a host socket. gVisor cannot
// accept on a listening socket handed in as a descriptor (it imports host
// sockets as connected ones), so the agent binds it itself.
const agentRunInSandbox = "/.agentbox/run"

// isGVisor reports whether spec runs on gVisor.
func isGVisor(spec sandbox.Spec) bool { return spec.Isolation == sandbox.IsolationGVisor }

// gvisorLimits is what gVisor sandboxes lack of the container level.
func gvisorLimits() *backend.GVisorLimits {
	return &backend.GVisorLimits{NoPause: true, NoSnapshot: true, NoRecycle: true, NoPorts: true, LimitsStopSandbox: true, NoRootOnRequest: true, NoRoot: true,
		Templates: []string{sandbox.TemplateHost, sandbox.TemplateDir, sandbox.TemplateImage}}
}

// checkGVisor refuses a gVisor spec the backend cannot run.
func (b *Backend) checkGVisor(spec sandbox.Spec) error {
	if !isGVisor(spec) {
		return nil
	}
	if b.cfg.RunscPath == "" || b.rootless {
		return sandbox.Errorf(sandbox.ClassInvalid, "isolation %q is not available on this server (no runsc configured: RUNSC_PATH)", sandbox.IsolationGVisor)
	}
	if !slices.Contains(gvisorLimits().Templates, spec.Template.Kind) {
		return sandbox.Errorf(sandbox.ClassInvalid, "isolation %q runs templates of kind %v, not %q", sandbox.IsolationGVisor, gvisorLimits().Templates, spec.Template.Kind)
	}
	if spec.Root {
		return sandbox.Errorf(sandbox.ClassInvalid, "isolation %q: root sandboxes are not available (root of gVisor's kernel would own host files as the host's root)", sandbox.IsolationGVisor)
	}
	if spec.AgentListen != "" {
		return sandbox.Errorf(sandbox.ClassInvalid, "isolation %q: a second agent address is not available", sandbox.IsolationGVisor)
	}
	for _, m := range spec.Mounts {
		if m.IDMapped {
			// A volume's idmapped bind mount has not been tried under
			// runsc's gofer: refused rather than shipped untested.
			return sandbox.Errorf(sandbox.ClassInvalid, "isolation %q: volumes are not available yet", sandbox.IsolationGVisor)
		}
	}
	return nil
}

// runscStateRoot is runsc's --root: its container state, on the state
// tmpfs like libcontainer's.
func (b *Backend) runscStateRoot() string { return filepath.Join(b.runRoot, "runsc") }

// runsc returns a runsc command with the backend's global flags.
func (b *Backend) runsc(ctx context.Context, network string, args ...string) *exec.Cmd {
	global := []string{"--root", b.runscStateRoot(), "--platform", "systrap", "--network", network,
		// The agent creates its socket in its host run directory.
		"--host-uds", "create",
		// Sandbox files are the sandbox's disk and binds of the host's
		// read-only directories; the Sentry reads them directly.
		"--directfs",
		// A writable root (dir and image templates) is written through to
		// its overlay's upper layer on the sandbox's disk, as for a
		// container: not to runsc's default overlay in the Sentry's
		// memory or a file store of its own, which the disk quota, a
		// stop/start and the sandbox's disk would not see alike.
		"--overlay2", "none"}
	if b.cfg.RunscDebugDir != "" {
		global = append(global, "--debug", "--debug-log", b.cfg.RunscDebugDir+"/")
	}
	return exec.CommandContext(ctx, b.cfg.RunscPath, append(global, args...)...)
}

// gvisorSpec turns the container spec of a sandbox into the one runsc
// boots: the agent runs as root of gVisor's kernel (no host id at all)
// with the container level's small root set, serving on a socket it
// binds in agentRunInSandbox; everything else keeps the sandbox user.
func gvisorSpec(oci *specs.Spec, spec sandbox.Spec) {
	args := oci.Process.Args
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "--listen" {
			args[i+1] = "unix://" + agentRunInSandbox + "/" + agentSocketName
		}
	}
	if u := oci.Process.User; u.UID != 0 && !slices.Contains(args, "--user") {
		args = append(args, "--user", strconv.Itoa(int(u.UID))+":"+strconv.Itoa(int(u.GID)))
	}
	oci.Process.Args = args
	if !spec.Root {
		// Root of gVisor's kernel writes host files as the host's root
		// (the Sentry sets their owners): no request may act as root.
		oci.Process.Env = append(oci.Process.Env, "AGENTBOX_ONLY_USER_REASON=the sandbox runs at isolation gvisor, which serves its default user only (no root on request)")
	}
	oci.Process.User = specs.User{UID: 0, GID: 0}
	caps := rootCapabilities
	oci.Process.Capabilities = &specs.LinuxCapabilities{Bounding: caps, Effective: caps, Permitted: caps}
	// The Sentry's own OOM score is the host's business; inside, the
	// adjustment is gVisor's.
	oci.Process.OOMScoreAdj = nil
	oci.Mounts = append(oci.Mounts, specs.Mount{Destination: agentRunInSandbox, Type: "bind", Source: "", Options: []string{"bind", "rw", "nosuid", "nodev", "noexec"}})
	ns := oci.Linux.Namespaces[:0]
	for _, n := range oci.Linux.Namespaces {
		// gVisor's kernel has its own; a network namespace without a
		// path is runsc's --network none.
		if n.Type == specs.UserNamespace || n.Type == specs.CgroupNamespace || (n.Type == specs.NetworkNamespace && n.Path == "") {
			continue
		}
		ns = append(ns, n)
	}
	oci.Linux.Namespaces = ns
	oci.Linux.UIDMappings, oci.Linux.GIDMappings = nil, nil
}

// bootGVisor starts the sandbox's agent on runsc and waits until it
// serves. It runs in the private mount namespace of boot, so runsc (and
// its gofer) see the sandbox's disk mount.
func (b *Backend) bootGVisor(ctx context.Context, bx *box, oci *specs.Spec, netnsPath string) error {
	spec := bx.rec.Spec
	gvisorSpec(oci, spec)
	for i := range oci.Mounts {
		if oci.Mounts[i].Destination == agentRunInSandbox {
			oci.Mounts[i].Source = bx.paths.run
		}
	}
	bundle := filepath.Join(bx.paths.dir, "gvisor")
	if err := os.MkdirAll(bundle, 0o700); err != nil {
		return err
	}
	data, err := json.Marshal(oci)
	if err != nil {
		return fmt.Errorf("encode runsc spec: %w", err)
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), data, 0o600); err != nil {
		return fmt.Errorf("write runsc spec: %w", err)
	}
	if err := os.MkdirAll(b.runscStateRoot(), 0o700); err != nil {
		return err
	}
	_ = os.Remove(bx.paths.socket())
	logFile, err := os.OpenFile(bx.paths.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	defer logFile.Close()
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer readyR.Close()
	seccompR, err := pipeWithData(b.seccompRoot)
	if err != nil {
		readyW.Close()
		return err
	}
	defer seccompR.Close()
	network := "none"
	if netnsPath != "" {
		network = "sandbox"
	}
	bx.phases.mark("runsc bundle, pipes, log file")
	// Not tied to ctx: the sandbox outlives the request that created it.
	cmd := b.runsc(context.WithoutCancel(ctx), network, "run", "--bundle", bundle,
		"--pass-fd", strconv.Itoa(agentReadyFd)+":"+strconv.Itoa(agentReadyFd),
		"--pass-fd", strconv.Itoa(agentSeccompFd)+":"+strconv.Itoa(agentSeccompFd),
		string(spec.ID))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.ExtraFiles = []*os.File{readyW, seccompR} // fds 3 and 4
	// runsc stays the parent of the sandbox's processes; it must not die
	// with the daemon (a restart reattaches).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	readyW.Close()
	if err != nil {
		return fmt.Errorf("start runsc: %w", err)
	}
	bx.pid = cmd.Process.Pid
	bx.exited = make(chan struct{})
	bx.stopping = false
	go b.watchRunsc(bx, cmd, bx.exited)
	bx.phases.mark("runsc run started")
	if err := waitReady(ctx, readyR, b.cfg.ReadyTimeout); err != nil {
		return fmt.Errorf("agent did not start on gVisor: %w%s", err, logTail(bx.diskPath("agent.log")))
	}
	bx.phases.mark("agent start until ready byte")
	bx.warm = nil
	return nil
}

// watchRunsc waits for runsc run, which lasts as long as the sandbox's
// init (the agent) does, and handles an unexpected end.
func (b *Backend) watchRunsc(bx *box, cmd *exec.Cmd, exited chan struct{}) {
	err := cmd.Wait()
	exit := backend.AgentExit{Code: -1}
	reason := "agent exited"
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		exit.Code = ee.ExitCode()
		reason = "agent exited: " + ee.String()
	} else if err == nil {
		exit.Code = 0
	}
	close(exited)
	b.onInitExit(bx, exited, reason, exit)
}

// teardownGVisor kills a gVisor sandbox and removes runsc's state of it
// (its cgroups go with runsc delete).
func (b *Backend) teardownGVisor(ctx context.Context, bx *box) {
	id := string(bx.id)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if out, err := b.runsc(ctx, "none", "kill", "--all", id, "KILL").CombinedOutput(); err != nil && b.runscKnows(ctx, id) {
		b.log.Warn("runsc kill", "sandbox", id, "err", err, "output", string(out))
	}
	if bx.exited != nil {
		select {
		case <-bx.exited:
		case <-time.After(10 * time.Second):
			b.log.Error("runsc did not exit after SIGKILL", "sandbox", id)
		}
	}
	bx.phases.mark("runsc kill, wait for its exit")
	if out, err := b.runsc(ctx, "none", "delete", "--force", id).CombinedOutput(); err != nil && b.runscKnows(ctx, id) {
		b.log.Error("runsc delete", "sandbox", id, "err", err, "output", string(out))
	}
	bx.phases.mark("runsc delete")
	b.removeStaleCgroups(id)
	_ = os.RemoveAll(filepath.Join(bx.paths.dir, "gvisor"))
}

// runscKnows reports whether runsc still has state of container id.
func (b *Backend) runscKnows(ctx context.Context, id string) bool {
	return b.runsc(ctx, "none", "state", id).Run() == nil
}

// runscRunning reports whether runsc's container id runs, and its
// sandbox's host pid.
func (b *Backend) runscRunning(ctx context.Context, id string) (bool, int) {
	out, err := b.runsc(ctx, "none", "state", id).Output()
	if err != nil {
		return false, 0
	}
	var st struct {
		Status string `json:"status"`
		Pid    int    `json:"pid"`
	}
	if json.Unmarshal(out, &st) != nil {
		return false, 0
	}
	return st.Status == "running", st.Pid
}

// reattachGVisor finds the runsc sandbox of a gVisor sandbox a previous
// daemon process started and checks that its agent answers; it watches
// the sandbox's process with a pidfd from then on.
func (b *Backend) reattachGVisor(bx *box) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	running, pid := b.runscRunning(ctx, string(bx.id))
	if !running || pid <= 0 {
		return false
	}
	conn, err := net.DialTimeout("unix", bx.paths.socket(), 2*time.Second)
	if err != nil {
		return false
	}
	conn.Close()
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return false
	}
	bx.pid = pid
	bx.exited = make(chan struct{})
	go b.watchPidfd(bx, pidfd, bx.exited)
	if err := b.reopenDisk(bx); err != nil {
		b.log.Error("reopen sandbox disk after restart", "sandbox", bx.id, "err", err)
	}
	return true
}

// errGVisor refuses an operation gVisor sandboxes do not have.
func errGVisor(id sandbox.ID, what string) error {
	return sandbox.Errorf(sandbox.ClassUnavailable, "sandbox %s runs at isolation gvisor, which has no %s (see GET /v1/info capabilities.gvisor)", id, what)
}

// removeOrphanRunsc kills and deletes runsc containers of no known
// sandbox: a daemon that died while it created one left no record (or
// one the teardown could not tell was gVisor's).
func (b *Backend) removeOrphanRunsc(known map[string]bool) {
	if b.cfg.RunscPath == "" {
		return
	}
	if _, err := os.Stat(b.runscStateRoot()); err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := b.runsc(ctx, "none", "list", "--quiet").Output()
	if err != nil {
		b.log.Warn("runsc list", "err", err)
		return
	}
	for _, id := range strings.Fields(string(out)) {
		if known[id] || sandbox.ID(id).Validate() != nil {
			continue
		}
		b.log.Warn("removing orphan gVisor sandbox", "id", id)
		_ = b.runsc(ctx, "none", "kill", "--all", id, "KILL").Run()
		_ = b.runsc(ctx, "none", "delete", "--force", id).Run()
		b.removeStaleCgroups(id)
	}
}
