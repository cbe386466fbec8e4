package kubenode

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	utilexec "k8s.io/utils/exec"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// podOf returns the pod's state once its sandbox was created (or failed
// to be), checking the container name (empty means the pod's one
// container).
func (p *provider) podOf(ctx context.Context, ns, name, container string) (*podState, error) {
	st := p.get(ns, name)
	if st == nil {
		return nil, errdefs.NotFoundf("pod %s/%s is not on this node", ns, name)
	}
	select {
	case <-st.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if st.plan == nil {
		return nil, errdefs.NotFoundf("pod %s/%s did not start", ns, name)
	}
	if container != "" && container != st.plan.container {
		return nil, errdefs.NotFoundf("pod %s/%s has no container %s", ns, name, container)
	}
	return st, nil
}

// running is podOf for a pod whose sandbox runs, with its sandbox.
func (p *provider) running(ctx context.Context, ns, name, container string) (*podState, sandbox.Info, error) {
	st, err := p.podOf(ctx, ns, name, container)
	if err != nil {
		return nil, sandbox.Info{}, err
	}
	info, err := p.cfg.Backend.Inspect(ctx, st.plan.id)
	if err != nil || info.State != sandbox.StateRunning {
		return nil, sandbox.Info{}, errdefs.InvalidInput(fmt.Sprintf("pod %s/%s is not running", ns, name))
	}
	return st, info, nil
}

func agentOf(info sandbox.Info, token string) *agentclient.Client {
	return agentclient.New(agentclient.Endpoint{Network: info.Agent.Network, Address: info.Agent.Address, Pid: info.Agent.Pid}, token)
}

// RunInContainer runs cmd in the pod's sandbox through its agent, with
// stdin, a TTY and resizes as the client asked; a non-zero exit reaches
// the client as the command's exit code.
func (p *provider) RunInContainer(ctx context.Context, ns, name, container string, cmd []string, attach api.AttachIO) error {
	if len(cmd) == 0 {
		return errdefs.InvalidInput("exec: no command")
	}
	st, info, err := p.running(ctx, ns, name, container)
	if err != nil {
		return err
	}
	c := agentOf(info, st.token)
	defer c.Close()
	opts := agentclient.StartOptions{Cmd: cmd[0], Args: cmd[1:], Stdin: attach.Stdin() != nil}
	if attach.TTY() {
		opts.PTY = &agentclient.PTYSize{Cols: 80, Rows: 24}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	proc, err := c.Start(ctx, opts)
	if err != nil {
		return fmt.Errorf("exec in %s/%s: %w", ns, name, err)
	}
	defer proc.Close()
	if in := attach.Stdin(); in != nil {
		go func() {
			buf := make([]byte, 32<<10)
			for {
				n, rerr := in.Read(buf)
				if n > 0 {
					if err := proc.SendStdin(ctx, append([]byte(nil), buf[:n]...)); err != nil {
						return
					}
				}
				if rerr != nil {
					_ = proc.CloseStdin(ctx)
					return
				}
			}
		}()
	}
	if attach.TTY() && attach.Resize() != nil {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case sz, ok := <-attach.Resize():
					if !ok {
						return
					}
					_ = proc.Resize(ctx, uint32(sz.Width), uint32(sz.Height))
				}
			}
		}()
	}
	write := func(w io.WriteCloser, b []byte) {
		if w != nil {
			_, _ = w.Write(b)
		}
	}
	for ev, err := range proc.Events() {
		if err != nil {
			return fmt.Errorf("exec in %s/%s: %w", ns, name, err)
		}
		switch ev.Kind {
		case agentclient.EventStdout, agentclient.EventPTY:
			write(attach.Stdout(), ev.Data)
		case agentclient.EventStderr:
			write(attach.Stderr(), ev.Data)
		case agentclient.EventEnd:
			if ev.End.ExitCode != 0 {
				code := ev.End.ExitCode
				if code < 0 {
					code = 137 // killed by a signal, as a shell reports it
				}
				return utilexec.CodeExitError{Err: fmt.Errorf("command terminated: %s", ev.End.Status), Code: code}
			}
			return nil
		}
	}
	return nil
}

// AttachToContainer is not offered: a sandbox pod's PID 1 is the agent.
func (p *provider) AttachToContainer(ctx context.Context, ns, name, container string, attach api.AttachIO) error {
	return errdefs.InvalidInput("attach is not supported on an agentbox node; use exec")
}

// GetContainerLogs serves the container's log: a sandbox pod's agent log,
// a generic pod's process output. tailLines, limitBytes and follow work.
func (p *provider) GetContainerLogs(ctx context.Context, ns, name, container string, opts api.ContainerLogOpts) (io.ReadCloser, error) {
	st, err := p.podOf(ctx, ns, name, container)
	if err != nil {
		return nil, err
	}
	if opts.Previous {
		return nil, errdefs.InvalidInput("previous logs are not kept on an agentbox node")
	}
	st.mu.Lock()
	path, plan := st.logPath, st.plan
	st.mu.Unlock()
	var f *os.File
	switch {
	case plan != nil && plan.agentbox:
		// The agent's log is on the sandbox's disk, which only the backend
		// reaches (it is not mounted in the node's namespace).
		f, err = p.cfg.Backend.OpenAgentLog(ctx, plan.id)
		if c := sandbox.ClassOf(err); c == sandbox.ClassNotFound || c == sandbox.ClassConflict {
			return io.NopCloser(bytes.NewReader(nil)), nil // not started, or gone
		}
	case path == "":
		return io.NopCloser(bytes.NewReader(nil)), nil
	default:
		f, err = os.Open(path)
		if errors.Is(err, os.ErrNotExist) {
			return io.NopCloser(bytes.NewReader(nil)), nil
		}
	}
	if err != nil {
		return nil, fmt.Errorf("logs of %s/%s: %w", ns, name, err)
	}
	if opts.Tail > 0 {
		if err := seekTail(f, opts.Tail); err != nil {
			f.Close()
			return nil, err
		}
	}
	var r io.ReadCloser = f
	if opts.Follow {
		fl := &follower{ctx: ctx, f: f, st: st}
		if plan == nil || !plan.agentbox {
			fl.path = path
		}
		r = fl
	}
	if opts.LimitBytes > 0 {
		r = struct {
			io.Reader
			io.Closer
		}{io.LimitReader(r, int64(opts.LimitBytes)), r}
	}
	return r, nil
}

// seekTail positions f at the start of its last n lines.
func seekTail(f *os.File, n int) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	size := fi.Size()
	const chunk = 32 << 10
	lines := 0
	pos := size
	buf := make([]byte, chunk)
	for pos > 0 {
		step := int64(chunk)
		if pos < step {
			step = pos
		}
		pos -= step
		if _, err := f.ReadAt(buf[:step], pos); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		for i := step - 1; i >= 0; i-- {
			if buf[i] != '\n' || pos+i == size-1 {
				continue
			}
			lines++
			if lines == n {
				_, err := f.Seek(pos+i+1, io.SeekStart)
				return err
			}
		}
	}
	_, err = f.Seek(0, io.SeekStart)
	return err
}

// follower reads a log as it grows until the pod ends or the client goes.
// path is the log's name when it rotates (a generic pod's): at the end of
// a file that was rotated away it goes on with the new one.
type follower struct {
	ctx  context.Context
	f    *os.File
	path string
	st   *podState
}

func (r *follower) Read(b []byte) (int, error) {
	for {
		n, err := r.f.Read(b)
		if n > 0 || !errors.Is(err, io.EOF) {
			return n, err
		}
		// The pod's state is read before the rotation is looked at: a pod
		// that ended has written all of its output, so what the checks
		// below find is the whole of it. (Read after, the writer could
		// rotate, write the rest and end in between, and the follower would
		// stop before the new file.)
		r.st.mu.Lock()
		phase, deleted := r.st.pod.Status.Phase, r.st.deleted
		r.st.mu.Unlock()
		ended := deleted || phase == corev1.PodSucceeded || phase == corev1.PodFailed
		if r.path != "" && r.rotated() {
			// Nothing more is written to a rotated file: once read to its
			// end (again, after the rename), the new one follows.
			if n, err := r.f.Read(b); n > 0 || !errors.Is(err, io.EOF) {
				return n, err
			}
			if f, err := os.Open(r.path); err == nil {
				r.f.Close()
				r.f = f
				continue
			}
		}
		if ended {
			// What was written between the read above and the pod's end.
			return r.f.Read(b)
		}
		select {
		case <-r.ctx.Done():
			return 0, io.EOF
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (r *follower) Close() error { return r.f.Close() }

// rotated reports whether the log's name now names another file.
func (r *follower) rotated() bool {
	cur, err := os.Stat(r.path)
	if err != nil {
		return false
	}
	open, err := r.f.Stat()
	return err == nil && !os.SameFile(cur, open)
}

// maxPodLogBytes bounds a generic pod's log on the node, as a kubelet's
// containerLogMaxSize (10 MiB) does: the output is on the node's disk, not
// the sandbox's, so without a bound a pod that prints without end fills
// the node.
const maxPodLogBytes = 10 << 20

// podLog is a generic pod's log file: at max bytes it is renamed to
// path.1 (replacing the one before) and a new one starts, so a pod holds at
// most twice max of the node's disk. Only the current file is served, as a
// kubelet does.
type podLog struct {
	path string
	max  int64
	f    *os.File
	size int64
}

func openPodLog(path string, max int64) (*podLog, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &podLog{path: path, max: max, f: f, size: fi.Size()}, nil
}

func (l *podLog) Write(b []byte) (int, error) {
	written := 0
	for len(b) > 0 {
		if l.size >= l.max {
			if err := l.rotate(); err != nil {
				return written, err
			}
		}
		n, err := l.f.Write(b[:min(int64(len(b)), l.max-l.size)])
		written += n
		l.size += int64(n)
		if err != nil {
			return written, err
		}
		b = b[n:]
	}
	return written, nil
}

func (l *podLog) rotate() error {
	if err := os.Rename(l.path, l.path+".1"); err != nil {
		return fmt.Errorf("rotate pod log: %w", err)
	}
	f, err := os.OpenFile(l.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("rotate pod log: %w", err)
	}
	l.f.Close()
	l.f, l.size = f, 0
	return nil
}

func (l *podLog) Close() error { return l.f.Close() }

// removePodLog removes a generic pod's log and its rotated predecessor.
func removePodLog(path string) error {
	return errors.Join(ignoreNotExist(os.Remove(path)), ignoreNotExist(os.Remove(path+".1")))
}

func ignoreNotExist(err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// PortForward connects the stream to a TCP port of the pod's sandbox.
func (p *provider) PortForward(ctx context.Context, ns, name string, port int32, stream io.ReadWriteCloser) error {
	defer stream.Close()
	st, _, err := p.running(ctx, ns, name, "")
	if err != nil {
		return err
	}
	conn, err := p.cfg.Backend.DialPort(ctx, st.plan.id, int(port))
	if err != nil {
		return fmt.Errorf("port-forward to %s/%s:%d: %w", ns, name, port, err)
	}
	defer conn.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(conn, stream); done <- struct{}{} }()
	go func() { _, _ = io.Copy(stream, conn); done <- struct{}{} }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	return nil
}

// GetStatsSummary reports each pod's memory and CPU from its cgroup.
func (p *provider) GetStatsSummary(ctx context.Context) (*statsv1alpha1.Summary, error) {
	now := metav1.Now()
	sum := &statsv1alpha1.Summary{Node: statsv1alpha1.NodeStats{NodeName: p.cfg.NodeName, StartTime: now}}
	pods, _ := p.GetPods(ctx)
	for _, pod := range pods {
		st := p.get(pod.Namespace, pod.Name)
		if st == nil || st.plan == nil {
			continue
		}
		s, err := p.cfg.Backend.Stats(ctx, st.plan.id)
		if err != nil {
			continue
		}
		mem := uint64(max(s.MemoryBytes, 0))
		cpu := uint64(s.CPUSeconds * 1e9)
		sum.Pods = append(sum.Pods, statsv1alpha1.PodStats{
			PodRef:    statsv1alpha1.PodReference{Name: pod.Name, Namespace: pod.Namespace, UID: string(pod.UID)},
			StartTime: now,
			CPU:       &statsv1alpha1.CPUStats{Time: now, UsageCoreNanoSeconds: &cpu},
			Memory:    &statsv1alpha1.MemoryStats{Time: now, UsageBytes: &mem, WorkingSetBytes: &mem},
		})
	}
	return sum, nil
}

// GetMetricsResource has no metrics of its own to offer.
func (p *provider) GetMetricsResource(context.Context) ([]*dto.MetricFamily, error) {
	return nil, nil
}

// runGeneric runs a generic pod's container process in its sandbox, its
// output into the container's log, restarting it as restartPolicy says.
func (p *provider) runGeneric(ctx context.Context, st *podState, info sandbox.Info) {
	plan := st.plan
	cfg := plan.spec.Template.Config
	argv := plan.cmd
	args := plan.args
	if len(argv) == 0 {
		argv = cfg.Entrypoint
		if len(args) == 0 {
			args = cfg.Cmd
		}
	}
	argv = append(append([]string{}, argv...), args...)
	if len(argv) == 0 {
		p.fail(st, "NoCommand", "the container has no command and the image no entrypoint or cmd")
		return
	}
	workdir := plan.workdir
	if workdir == "" {
		workdir = cfg.WorkingDir
	}
	logPath := filepath.Join(p.cfg.LogDir, string(plan.id)+".log")
	logf, err := openPodLog(logPath, maxPodLogBytes)
	if err != nil {
		p.fail(st, "LogFailed", err.Error())
		return
	}
	defer logf.Close()
	st.mu.Lock()
	st.logPath = logPath
	policy := st.pod.Spec.RestartPolicy
	st.mu.Unlock()
	c := agentOf(info, st.token)
	defer c.Close()
	out := bufio.NewWriter(logf)
	var restarts int32
	for {
		proc, err := c.Start(ctx, agentclient.StartOptions{Cmd: argv[0], Args: argv[1:], Cwd: workdir, Tag: "pod"})
		if ctx.Err() != nil {
			return
		}
		code := 128
		status := ""
		if err != nil {
			fmt.Fprintf(out, "agentbox node: start %s: %v\n", argv[0], err)
			status = err.Error()
		} else {
			p.setRunning(st, metav1.Now(), restarts)
			p.publish(st)
			for ev, err := range proc.Events() {
				if err != nil {
					status = err.Error()
					break
				}
				switch ev.Kind {
				case agentclient.EventStdout, agentclient.EventStderr:
					_, _ = out.Write(ev.Data)
					_ = out.Flush()
				case agentclient.EventEnd:
					code, status = ev.End.ExitCode, ev.End.Status
					if code < 0 {
						code = 137
					}
				}
			}
			proc.Close()
		}
		_ = out.Flush()
		if ctx.Err() != nil {
			return
		}
		again := policy == corev1.RestartPolicyAlways || (policy == corev1.RestartPolicyOnFailure && code != 0)
		if !again {
			phase, reason := corev1.PodSucceeded, "Completed"
			if code != 0 {
				phase, reason = corev1.PodFailed, "Error"
			}
			p.terminate(st, phase, int32(code), reason, status)
			p.release(st) // before the status shows the end
			p.publish(st)
			return
		}
		restarts++
		backoff := min(time.Second<<min(restarts-1, 5), 30*time.Second)
		st.mu.Lock()
		if len(st.pod.Status.ContainerStatuses) == 1 {
			cs := &st.pod.Status.ContainerStatuses[0]
			cs.Ready, cs.RestartCount = false, restarts
			cs.LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: int32(code), Reason: "Error", Message: status, FinishedAt: metav1.Now()}}
			cs.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: fmt.Sprintf("back-off %s restarting the container", backoff)}}
		}
		setConditions(&st.pod.Status, false, metav1.Now())
		st.mu.Unlock()
		p.publish(st)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
	}
}
