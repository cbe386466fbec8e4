package docker

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// boot starts the sandbox's container and waits for its agent. bx.mu held.
func (b *Backend) boot(ctx context.Context, bx *box) error {
	// A socket left by the previous boot must not pass for a ready agent.
	_ = os.Remove(b.socketPath(bx))
	if _, err := b.api.ContainerStart(ctx, bx.rec.Container, client.ContainerStartOptions{}); err != nil {
		return engineErr(err, "start container")
	}
	st, err := b.state(ctx, bx)
	if err != nil {
		return engineErr(err, "inspect container")
	}
	if err := b.waitReady(ctx, bx, st.Pid); err != nil {
		return err
	}
	bx.stopping = false
	b.attach(ctx, bx)
	return nil
}

// attach notes the running agent's pid and cgroups and watches for its
// exit. bx.mu held.
func (b *Backend) attach(ctx context.Context, bx *box) {
	bx.pid, bx.cgroups = 0, nil
	if st, err := b.state(ctx, bx); err == nil && st.Pid > 0 {
		if cg, err := cgroupDirs(st.Pid); err == nil {
			bx.pid, bx.cgroups = st.Pid, cg
		}
	}
	b.watch(bx)
}

// waitReady polls the agent's health until it answers, the container
// exits, or ReadyTimeout passes. pid is the agent's host pid: only a
// socket it listens on counts.
func (b *Backend) waitReady(ctx context.Context, bx *box, pid int) error {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.ReadyTimeout)
	defer cancel()
	c := agentclient.New(agentclient.Endpoint{Network: "unix", Address: b.socketPath(bx), Pid: agentPeerPid(bx, pid)}, bx.rec.AccessToken)
	defer c.Close()
	delay := 5 * time.Millisecond
	for attempt := 0; ; attempt++ {
		if _, err := os.Stat(b.socketPath(bx)); err == nil {
			hctx, hcancel := context.WithTimeout(ctx, 2*time.Second)
			err = c.Health(hctx)
			hcancel()
			if err == nil {
				return nil
			}
		}
		if attempt%10 == 9 {
			// Now and then: has the agent died (bad image, no /bin/sh is
			// fine, but a missing loader or a seccomp refusal is not)?
			if st, err := b.api.ContainerInspect(ctx, bx.rec.Container, client.ContainerInspectOptions{}); err == nil && st.Container.State != nil && !st.Container.State.Running {
				return fmt.Errorf("docker: sandbox %s: the agent exited at boot (code %d) %s", bx.id, st.Container.State.ExitCode, b.logTail(bx))
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("docker: sandbox %s: agent not ready after %s: %w %s", bx.id, b.cfg.ReadyTimeout, ctx.Err(), b.logTail(bx))
		case <-time.After(delay):
		}
		delay = min(delay*2, 100*time.Millisecond)
	}
}

// logTail is the end of the agent's log, to tell why a boot failed.
func (b *Backend) logTail(bx *box) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rc, err := b.api.ContainerLogs(ctx, bx.rec.Container, client.ContainerLogsOptions{ShowStderr: true, ShowStdout: true, Tail: "5"})
	if err != nil {
		return ""
	}
	defer rc.Close()
	buf := make([]byte, 2048)
	n, _ := io.ReadFull(rc, buf)
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("(agent log: %q)", cleanLog(buf[:n]))
}

// watch waits for the container to exit on its own (OOM kill of the agent,
// a crash) and then records the sandbox as stopped and reports it.
func (b *Backend) watch(bx *box) {
	if bx.stopWatch != nil {
		bx.stopWatch()
	}
	ctx, cancel := context.WithCancel(context.Background())
	bx.stopWatch = cancel
	wait := b.api.ContainerWait(ctx, bx.rec.Container, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
	go func() {
		var reason string
		select {
		case r := <-wait.Result:
			reason = fmt.Sprintf("agent exited: code %d", r.StatusCode)
		case err := <-wait.Error:
			if ctx.Err() != nil {
				return
			}
			// The wait broke (the engine restarted, a connection dropped):
			// that alone says nothing of the container. Look again, and
			// keep watching one that still runs.
			if b.stillRunning(ctx, bx) {
				bx.mu.Lock()
				if !bx.stopping && !bx.rec.Stopped && ctx.Err() == nil {
					b.watch(bx)
				}
				bx.mu.Unlock()
				return
			}
			reason = "agent exited: " + err.Error()
		case <-ctx.Done():
			return
		}
		if b.abandoned.Load() || ctx.Err() != nil {
			return
		}
		bx.mu.Lock()
		if bx.stopping || bx.rec.Stopped {
			bx.mu.Unlock()
			return
		}
		if st, err := b.api.ContainerInspect(context.Background(), bx.rec.Container, client.ContainerInspectOptions{}); err == nil && st.Container.State != nil && st.Container.State.OOMKilled {
			reason += " (out of memory)"
		}
		bx.rec.Stopped, bx.rec.Reason = true, reason
		bx.pid, bx.cgroups = 0, nil
		if err := b.saveRecord(bx); err != nil {
			b.log.Error("save record", "sandbox", bx.id, "err", err)
		}
		bx.mu.Unlock()
		b.log.Warn("sandbox agent exited", "sandbox", bx.id, "reason", reason)
		if fn := b.onExit.Load(); fn != nil {
			(*fn)(bx.id, reason)
		}
	}()
}

// stillRunning asks the engine, for a few seconds, whether bx's container
// runs; false when it does not or the engine does not answer.
func (b *Backend) stillRunning(ctx context.Context, bx *box) bool {
	for attempt := 0; attempt < 10 && ctx.Err() == nil; attempt++ {
		ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
		res, err := b.api.ContainerInspect(ictx, bx.rec.Container, client.ContainerInspectOptions{})
		cancel()
		if err == nil && res.Container.State != nil {
			return res.Container.State.Running
		}
		if cerrdefs.IsNotFound(err) {
			return false
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(attempt+1) * 200 * time.Millisecond):
		}
	}
	return false
}

// kill stops the container at once (the agent, PID 1, ignores SIGTERM).
func (b *Backend) kill(ctx context.Context, bx *box) error {
	bx.stopping = true
	bx.pid, bx.cgroups = 0, nil
	if bx.stopWatch != nil {
		bx.stopWatch()
		bx.stopWatch = nil
	}
	timeout := 0
	if _, err := b.api.ContainerStop(ctx, bx.rec.Container, client.ContainerStopOptions{Signal: "SIGKILL", Timeout: &timeout}); err != nil && !cerrdefs.IsNotFound(err) {
		// A paused container must be thawed before it can die.
		if _, uerr := b.api.ContainerUnpause(ctx, bx.rec.Container, client.ContainerUnpauseOptions{}); uerr == nil {
			_, err = b.api.ContainerStop(ctx, bx.rec.Container, client.ContainerStopOptions{Signal: "SIGKILL", Timeout: &timeout})
		}
		if err != nil && !cerrdefs.IsNotFound(err) {
			return engineErr(err, "stop container")
		}
	}
	return nil
}

// teardown removes the container and then the sandbox's directory. When
// the engine cannot remove the container, the directory (with the record)
// stays, so a retry, or the next Recover, finds what is left.
func (b *Backend) teardown(ctx context.Context, bx *box) error {
	_ = b.kill(ctx, bx)
	if _, err := b.api.ContainerRemove(ctx, bx.rec.Container, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
		b.log.Error("remove container", "sandbox", bx.id, "err", err)
		return engineErr(err, "remove container")
	}
	if err := os.RemoveAll(bx.dir); err != nil {
		return fmt.Errorf("docker: remove sandbox dir: %w", err)
	}
	return nil
}

// Stop implements backend.Backend.
func (b *Backend) Stop(ctx context.Context, id sandbox.ID) error {
	bx, err := b.lookup(id)
	if err != nil {
		return err
	}
	bx.mu.Lock()
	defer bx.mu.Unlock()
	if err := b.kill(ctx, bx); err != nil {
		return err
	}
	if !bx.rec.Stopped {
		bx.rec.Stopped, bx.rec.Reason = true, "stopped"
		return b.saveRecord(bx)
	}
	return nil
}

// Start implements backend.Backend.
func (b *Backend) Start(ctx context.Context, id sandbox.ID) (sandbox.Info, error) {
	bx, err := b.lookup(id)
	if err != nil {
		return sandbox.Info{}, err
	}
	bx.mu.Lock()
	defer bx.mu.Unlock()
	if st, err := b.state(ctx, bx); err == nil && st.Running {
		if !bx.rec.Stopped {
			return b.info(ctx, bx), nil
		}
		// Recorded stopped but running (the engine was unreachable when
		// the watcher looked): a fresh boot, so the agent is watched again.
		if err := b.kill(ctx, bx); err != nil {
			return sandbox.Info{}, err
		}
	}
	if err := b.makeDirs(bx); err != nil {
		return sandbox.Info{}, err
	}
	if err := b.boot(ctx, bx); err != nil {
		_ = b.kill(context.WithoutCancel(ctx), bx)
		return sandbox.Info{}, err
	}
	bx.rec.Stopped, bx.rec.Reason = false, ""
	if err := b.saveRecord(bx); err != nil {
		return sandbox.Info{}, err
	}
	return b.info(ctx, bx), nil
}

// Destroy implements backend.Backend.
func (b *Backend) Destroy(ctx context.Context, id sandbox.ID) error {
	if err := id.Validate(); err != nil {
		return nil // nothing of that name can exist
	}
	b.mu.Lock()
	bx, ok := b.boxes[id]
	b.mu.Unlock()
	if !ok {
		return nil
	}
	bx.mu.Lock()
	defer bx.mu.Unlock()
	if err := b.teardown(ctx, bx); err != nil {
		return err
	}
	b.mu.Lock()
	delete(b.boxes, id)
	b.mu.Unlock()
	return nil
}

// state is the container's state as the engine sees it.
func (b *Backend) state(ctx context.Context, bx *box) (*container.State, error) {
	res, err := b.api.ContainerInspect(ctx, bx.rec.Container, client.ContainerInspectOptions{})
	if err != nil {
		return nil, err
	}
	if res.Container.State == nil {
		return nil, fmt.Errorf("container %s has no state", bx.rec.Container)
	}
	return res.Container.State, nil
}

// info describes bx. bx.mu held.
func (b *Backend) info(ctx context.Context, bx *box) sandbox.Info {
	spec := bx.rec.Spec
	spec.AccessToken = ""
	in := sandbox.Info{ID: bx.id, Spec: spec, CreatedAt: bx.rec.CreatedAt,
		Agent: sandbox.Endpoint{Network: "unix", Address: b.socketPath(bx)}}
	st, err := b.state(ctx, bx)
	switch {
	case err != nil && cerrdefs.IsNotFound(err):
		in.State, in.Reason = sandbox.StateError, "container is gone"
	case err != nil:
		in.State, in.Reason = sandbox.StateError, err.Error()
	case st.Paused:
		in.State, in.Pid, in.Agent.Pid = sandbox.StatePaused, st.Pid, agentPeerPid(bx, st.Pid)
	case st.Running && !bx.rec.Stopped:
		in.State, in.Pid, in.Agent.Pid = sandbox.StateRunning, st.Pid, agentPeerPid(bx, st.Pid)
	default:
		in.State, in.Reason = sandbox.StateStopped, bx.rec.Reason
	}
	return in
}

// Inspect implements backend.Backend.
func (b *Backend) Inspect(ctx context.Context, id sandbox.ID) (sandbox.Info, error) {
	bx, err := b.lookup(id)
	if err != nil {
		return sandbox.Info{}, err
	}
	bx.mu.Lock()
	defer bx.mu.Unlock()
	return b.info(ctx, bx), nil
}

// agentPeerPid is the host pid that must listen on the agent's socket
// (pid: the container's): 0, no check, at isolation gvisor, where every
// socket made inside is gVisor's kernel's and its host listener is runsc's
// sandbox process, whoever bound it inside. There the socket's directory
// is root's inside gVisor (0700) instead: only the agent, root of gVisor's
// kernel, can bind in it; sandbox code, uid 1000, cannot.
func agentPeerPid(bx *box, pid int) int {
	if bx.rec.Spec.Isolation == sandbox.IsolationGVisor {
		return 0
	}
	return pid
}

// Pause implements backend.Pauser with the engine's freezer.
func (b *Backend) Pause(ctx context.Context, id sandbox.ID) error {
	bx, err := b.lookup(id)
	if err != nil {
		return err
	}
	if bx.rec.Spec.Isolation == sandbox.IsolationGVisor {
		return sandbox.Errorf(sandbox.ClassUnavailable, "sandbox %s runs at isolation gvisor, which has no pause on the Docker backend (see GET /v1/info capabilities.gvisor)", id)
	}
	bx.mu.Lock()
	defer bx.mu.Unlock()
	st, err := b.state(ctx, bx)
	if err != nil {
		return engineErr(err, "inspect container")
	}
	switch {
	case st.Paused:
		return nil
	case !st.Running || bx.rec.Stopped:
		return sandbox.Errorf(sandbox.ClassConflict, "sandbox %s is not running", id)
	}
	if _, err := b.api.ContainerPause(ctx, bx.rec.Container, client.ContainerPauseOptions{}); err != nil {
		return engineErr(err, "pause container")
	}
	return nil
}

// Resume implements backend.Pauser.
func (b *Backend) Resume(ctx context.Context, id sandbox.ID) error {
	bx, err := b.lookup(id)
	if err != nil {
		return err
	}
	bx.mu.Lock()
	defer bx.mu.Unlock()
	st, err := b.state(ctx, bx)
	if err != nil {
		return engineErr(err, "inspect container")
	}
	if !st.Paused {
		if st.Running {
			return nil
		}
		return sandbox.Errorf(sandbox.ClassConflict, "sandbox %s is not paused", id)
	}
	if _, err := b.api.ContainerUnpause(ctx, bx.rec.Container, client.ContainerUnpauseOptions{}); err != nil {
		return engineErr(err, "resume container")
	}
	return nil
}
