package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/config"
)

// WORKERS above 1: `agentbox serve` becomes a supervisor of that many
// worker processes. Each worker is a replica of its own on the shared Redis
// (as several daemons on several hosts are): its own NODE_ID
// (<node>-w<i>), data dir (<data dir>/workers/<i>), sandbox bridge and
// subnet (<NETWORK_BRIDGE>-w<i> and a slice of NETWORK_SUBNET when they are
// set, else free ones it picks), and a listener of its own that the other
// replicas forward to. All of them accept the public HOST:PORT together
// (SO_REUSEPORT: the kernel spreads connections over them), and a request
// for a sandbox another worker runs is forwarded there as between replicas.
// The supervisor restarts a worker that dies, stops every worker on
// SIGTERM, and its workers die with it (PR_SET_PDEATHSIG) even when it is
// killed outright.

// workerEnv marks a worker process: its value is the worker's index.
const workerEnv = "AGENTBOX_WORKER"

// workerIndex returns the worker index of this process, -1 for a
// supervisor or a lone daemon.
func workerIndex() int {
	v, ok := os.LookupEnv(workerEnv)
	if !ok {
		return -1
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// workerSetting is one setting a worker gets on top of the supervisor's.
type workerSetting struct{ name, value string }

// workerSettings returns worker i's own settings out of n. The secret
// (generated when CLUSTER_SECRET is unset) goes through the environment,
// not the command line other users can read.
// An unset NETWORK_BRIDGE or NETWORK_SUBNET stays unset: each worker, with
// a data dir of its own, picks a free one like any daemon.
func workerSettings(cfg *config.Config, dataDir, node string, i, n int) ([]workerSetting, error) {
	suffix := "-w" + strconv.Itoa(i)
	out := []workerSetting{
		{"AGENTBOX_DATA_DIR", filepath.Join(dataDir, "workers", strconv.Itoa(i))},
		{"NODE_ID", node + suffix},
	}
	if bridge := string(cfg.NetworkBridge); bridge != "" {
		if len(bridge)+len(suffix) > 15 {
			bridge = bridge[:15-len(suffix)]
		}
		out = append(out, workerSetting{"NETWORK_BRIDGE", bridge + suffix})
	}
	if cfg.NetworkSubnet.Prefix().IsValid() {
		subnet, err := splitSubnet(cfg.NetworkSubnet.Prefix(), i, n)
		if err != nil {
			return nil, err
		}
		out = append(out, workerSetting{"NETWORK_SUBNET", subnet.String()})
	}
	return out, nil
}

// splitSubnet returns the i-th of n equal slices of p (n rounded up to a
// power of two); each must keep at least 16 addresses.
func splitSubnet(p netip.Prefix, i, n int) (netip.Prefix, error) {
	extra := bits.Len(uint(n - 1))
	b := p.Bits() + extra
	if b > 28 {
		return netip.Prefix{}, fmt.Errorf("NETWORK_SUBNET %s is too small for %d workers: each needs a /28 or more of it", p, n)
	}
	base := p.Masked().Addr().As4()
	v := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
	v += uint32(i) << (32 - b)
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), b), nil
}

// checkWorkers refuses WORKERS settings that cannot work, before anything
// starts.
func checkWorkers(cfg *config.Config) error {
	if cfg.Workers <= 1 {
		return nil
	}
	if !cfg.Redis.Enabled {
		return fmt.Errorf("WORKERS=%d needs REDIS_ENABLED=true: the workers are replicas that share their state in Redis (docs/scale-out.md)", cfg.Workers)
	}
	if cfg.TemplateDir != "" {
		return fmt.Errorf("WORKERS=%d: leave TEMPLATE_DIR unset (a template store serves one daemon at a time; each worker keeps its own in its data dir)", cfg.Workers)
	}
	if cfg.NodeAddress != "" {
		return fmt.Errorf("WORKERS=%d: NODE_ADDRESS names one daemon; each worker announces its own listener on HOST", cfg.Workers)
	}
	if !cfg.NetworkSubnet.Prefix().IsValid() {
		return nil
	}
	_, err := splitSubnet(cfg.NetworkSubnet.Prefix(), cfg.Workers-1, cfg.Workers)
	return err
}

// superviseWorkers runs cfg.Workers worker processes until ctx ends, then
// stops them (SIGTERM, then SIGKILL after the grace) and returns.
func superviseWorkers(ctx context.Context, cfg *config.Config, log *slog.Logger) error {
	if err := checkWorkers(cfg); err != nil {
		return err
	}
	if len(cfg.APIKeys) == 0 && !cfg.Loopback() {
		return fmt.Errorf("refusing to listen on %s without an API key: set BEARER_TOKEN or API_KEYS, or HOST=127.0.0.1", cfg.Host)
	}
	if err := os.MkdirAll(filepath.Join(cfg.DataDir, "workers"), 0o711); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return err
	}
	// The running binary itself: os.Executable may name runc's sealed
	// in-memory copy of it, which has no path.
	exe := "/proc/self/exe"
	env := os.Environ()
	if cfg.ClusterSecret == "" {
		// The workers forward to each other: they need a shared secret,
		// which nothing else needs to know.
		var b [32]byte
		if _, err := rand.Read(b[:]); err != nil {
			return err
		}
		env = append(env, "CLUSTER_SECRET="+hex.EncodeToString(b[:]))
		log.Info("CLUSTER_SECRET is not set: the workers share a generated one (set it to add replicas on other hosts)")
	}
	node := nodeID(cfg, dataDir)
	log.Info("agentbox starting workers", "workers", cfg.Workers, "addr", cfg.Addr(), "node", node, "data_dir", dataDir)
	// A worker whose first run ends at once (its Redis unreachable, its
	// port taken) would fail again: stop them all and fail, as a lone
	// daemon does, rather than restart it for ever.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var startErr error
	var startOnce sync.Once
	failed := func(err error) {
		startOnce.Do(func() { startErr = err; cancel() })
	}
	var wg sync.WaitGroup
	for i := 0; i < cfg.Workers; i++ {
		settings, err := workerSettings(cfg, dataDir, node, i, cfg.Workers)
		if err != nil {
			return err
		}
		args := append([]string(nil), os.Args[1:]...)
		for _, s := range settings {
			args = append(args, "--set", s.name+"="+s.value)
		}
		w := &worker{index: i, exe: exe, args: args, env: append(env, workerEnv+"="+strconv.Itoa(i)), log: log.With("worker", i), failed: failed}
		wg.Add(1)
		go func() { defer wg.Done(); w.run(ctx) }()
	}
	wg.Wait()
	log.Info("every worker stopped")
	return startErr
}

// readyFD is the worker's end of the pipe it reports readiness on (the
// first of cmd.ExtraFiles).
const readyFD = 3

// keepReadyPipePrivate makes the readiness pipe close-on-exec in a worker,
// so the processes it starts do not hold it open.
func keepReadyPipePrivate() {
	if workerIndex() >= 0 {
		syscall.CloseOnExec(readyFD)
	}
}

// workerReady tells the supervisor this worker serves (a no-op elsewhere).
func workerReady() {
	if workerIndex() < 0 {
		return
	}
	f := os.NewFile(readyFD, "ready")
	_, _ = f.Write([]byte{1})
	_ = f.Close()
}

// workerGrace is how long a stopping worker may take (its own shutdown
// waits up to 10 s for requests and 2 min for AUTO_CLEANUP) before it is
// killed.
const workerGrace = 3 * time.Minute

// worker is one supervised worker process.
type worker struct {
	index int
	exe   string
	args  []string
	env   []string
	log   *slog.Logger
	// failed ends the supervisor with err (a first run that did not get
	// ready).
	failed func(err error)
	ready  atomic.Bool // the worker reported it serves, once
}

// run starts the worker, restarts it when it dies (after a pause that
// grows while it keeps dying fast), and stops it when ctx ends.
func (w *worker) run(ctx context.Context) {
	// PR_SET_PDEATHSIG fires when the thread that started the child ends:
	// keep this goroutine on its thread for as long as it supervises.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	pause := time.Second
	for first := true; ctx.Err() == nil; first = false {
		started := time.Now()
		err := w.once(ctx)
		if ctx.Err() != nil {
			return
		}
		if first && !w.ready.Load() {
			w.log.Error("worker failed at start; stopping every worker", "err", err)
			w.failed(fmt.Errorf("worker %d failed at start (%v): see its log above", w.index, err))
			return
		}
		if time.Since(started) > time.Minute {
			pause = time.Second // it ran a while: not a crash loop
		}
		w.log.Error("worker exited; restarting it", "err", err, "after", pause)
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, 30*time.Second)
	}
}

// once runs the worker process until it exits or ctx ends (then it is
// stopped).
func (w *worker) once(ctx context.Context) error {
	cmd := exec.Command(w.exe, w.args...)
	cmd.Env = w.env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	pr, pw, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("start worker: %w", err)
	}
	defer pr.Close()
	cmd.ExtraFiles = []*os.File{pw} // fd 3: readyFD
	err = cmd.Start()
	pw.Close()
	if err != nil {
		return fmt.Errorf("start worker: %w", err)
	}
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		var b [1]byte
		if n, _ := pr.Read(b[:]); n == 1 {
			w.ready.Store(true)
		}
	}()
	w.log.Info("worker started", "pid", cmd.Process.Pid)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		// Its readiness byte, or the pipe's end (the worker set it
		// close-on-exec: nothing it started holds it).
		select {
		case <-readDone:
		case <-time.After(5 * time.Second):
		}
		return err
	case <-ctx.Done():
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		w.log.Info("worker stopped", "pid", cmd.Process.Pid)
		return err
	case <-time.After(workerGrace):
		_ = cmd.Process.Kill()
		w.log.Error("worker did not stop within its grace: killed", "pid", cmd.Process.Pid)
		return errors.Join(errors.New("killed after its grace"), <-done)
	}
}

// workerListeners returns a worker's listeners: the public HOST:PORT,
// shared with the other workers (SO_REUSEPORT), and one of its own on HOST
// and a free port, which it announces to the other replicas (a request
// forwarded to the shared port could land on any worker).
func workerListeners(ctx context.Context, cfg *config.Config) (public, own net.Listener, announce string, err error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
		}); err != nil {
			return err
		}
		return serr
	}}
	public, err = lc.Listen(ctx, "tcp", cfg.Addr())
	if err != nil {
		return nil, nil, "", fmt.Errorf("listen on the workers' shared port: %w", err)
	}
	own, err = net.Listen("tcp", net.JoinHostPort(string(cfg.Host), "0"))
	if err != nil {
		public.Close()
		return nil, nil, "", fmt.Errorf("listen on the worker's own port: %w", err)
	}
	host, port, _ := net.SplitHostPort(own.Addr().String())
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1" // every interface: the other workers of this host reach it here
	}
	return public, own, "http://" + net.JoinHostPort(host, port), nil
}
