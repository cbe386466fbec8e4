package builder

import (
	"context"
	"fmt"
	"io"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// command executes one instruction of a stage.
func (bd *build) command(ctx context.Context, st *stageState, c instructions.Command) error {
	start := time.Now()
	text := c.Name()
	if s, ok := c.(fmt.Stringer); ok {
		text = s.String()
	}
	bd.begin(text, st.name, lineOf(c.Location()))
	if e, ok := c.(instructions.SupportsSingleWordExpansion); ok {
		if err := e.Expand(bd.expander(st.vars.getter())); err != nil {
			return err
		}
	}
	switch c := c.(type) {
	case *instructions.RunCommand:
		return bd.run(ctx, st, c)
	case *instructions.CopyCommand:
		return bd.copy(ctx, st, copyArgs{cmd: "COPY", sd: c.SourcesAndDest, from: c.From, chown: c.Chown, chmod: c.Chmod})
	case *instructions.AddCommand:
		return bd.copy(ctx, st, copyArgs{cmd: "ADD", sd: c.SourcesAndDest, chown: c.Chown, chmod: c.Chmod, extract: c.Unpack == nil || *c.Unpack})
	case *instructions.WorkdirCommand:
		return bd.workdir(ctx, st, c)
	}
	if err := bd.configStep(st, c); err != nil {
		return err
	}
	bd.result(st.stateKey(), start)
	return nil
}

// configStep applies an instruction that only changes the image config
// or the stage's variables.
func (bd *build) configStep(st *stageState, c instructions.Command) error {
	cfg := &st.cfg
	switch c := c.(type) {
	case *instructions.EnvCommand:
		for _, kv := range c.Env {
			cfg.Env = kvList(cfg.Env).set(kv.Key, kv.Value)
		}
	case *instructions.ArgCommand:
		bd.stageArgs(st, c)
	case *instructions.LabelCommand:
		for _, kv := range c.Labels {
			setLabel(cfg, kv.Key, kv.Value)
		}
	case *instructions.MaintainerCommand:
		setLabel(cfg, "maintainer", c.Maintainer)
	case *instructions.ExposeCommand:
		return bd.expose(st, c)
	case *instructions.UserCommand:
		cfg.User = c.User
	case *instructions.CmdCommand:
		cfg.Cmd = st.cmdline(c.ShellDependantCmdLine)
		st.cmdSet = true
	case *instructions.EntrypointCommand:
		cfg.Entrypoint = st.cmdline(c.ShellDependantCmdLine)
		// Docker: an ENTRYPOINT drops a CMD inherited from the base.
		if !st.cmdSet {
			cfg.Cmd = nil
		}
	case *instructions.HealthCheckCommand:
		return healthcheck(cfg, c)
	case *instructions.ShellCommand:
		st.shell = slices.Clone(c.Shell)
	case *instructions.StopSignalCommand:
		if err := checkSignal(c.Signal); err != nil {
			return err
		}
		cfg.StopSignal = c.Signal
	case *instructions.OnbuildCommand:
		bd.rep.warn("line %d: ONBUILD is ignored: templates do not run triggers", lineOf(c.Location()))
	case *instructions.VolumeCommand:
		bd.rep.warn("line %d: VOLUME is ignored: a sandbox's whole root filesystem is writable and private", lineOf(c.Location()))
	default:
		return fmt.Errorf("unsupported instruction")
	}
	return nil
}

func setLabel(cfg *sandbox.ImageConfig, k, v string) {
	if cfg.Labels == nil {
		cfg.Labels = map[string]string{}
	}
	cfg.Labels[k] = v
}

// stageArgs declares ARGs in a stage: a build arg wins, then the default,
// then a meta arg of the same name.
func (bd *build) stageArgs(st *stageState, c *instructions.ArgCommand) {
	for _, kv := range c.Args {
		v, ok := bd.opts.BuildArgs[kv.Key]
		if ok {
			bd.used[kv.Key] = true
		} else if kv.Value != nil {
			v, ok = *kv.Value, true
		} else {
			v, ok = bd.meta.get(kv.Key)
		}
		if ok {
			st.vars.args = st.vars.args.set(kv.Key, v)
		}
	}
}

// cmdline builds CMD/ENTRYPOINT/RUN argv: the shell form runs in SHELL.
func (st *stageState) cmdline(c instructions.ShellDependantCmdLine) []string {
	if !c.PrependShell {
		return slices.Clone(c.CmdLine)
	}
	if len(c.CmdLine) == 0 {
		return nil
	}
	return append(slices.Clone(st.shell), strings.Join(c.CmdLine, " "))
}

// maxPortRange bounds one EXPOSE range.
const maxPortRange = 1024

// expose records ports as "N/proto", expanding ranges as Docker does.
func (bd *build) expose(st *stageState, c *instructions.ExposeCommand) error {
	for _, word := range c.Ports {
		specs, err := bd.lex.ProcessWords(word, st.vars.getter())
		if err != nil {
			return err
		}
		for _, spec := range specs {
			ports, err := parsePorts(spec)
			if err != nil {
				return err
			}
			for _, p := range ports {
				if !slices.Contains(st.cfg.Ports, p) {
					st.cfg.Ports = append(st.cfg.Ports, p)
				}
			}
		}
	}
	// Docker keeps exposed ports as a set: sort for a stable config.
	slices.Sort(st.cfg.Ports)
	return nil
}

func parsePorts(spec string) ([]string, error) {
	num, proto, _ := strings.Cut(spec, "/")
	proto = strings.ToLower(proto)
	if proto == "" {
		proto = "tcp"
	}
	if proto != "tcp" && proto != "udp" && proto != "sctp" {
		return nil, fmt.Errorf("invalid port %q: protocol must be tcp, udp or sctp", spec)
	}
	lo, hi, isRange := strings.Cut(num, "-")
	if !isRange {
		hi = lo
	}
	a, err1 := strconv.ParseUint(lo, 10, 16)
	b, err2 := strconv.ParseUint(hi, 10, 16)
	if err1 != nil || err2 != nil || a == 0 || b < a {
		return nil, fmt.Errorf("invalid port %q", spec)
	}
	if b-a >= maxPortRange {
		return nil, fmt.Errorf("port range %q: more than %d ports", spec, maxPortRange)
	}
	var out []string
	for p := a; p <= b; p++ {
		out = append(out, fmt.Sprintf("%d/%s", p, proto))
	}
	return out, nil
}

func healthcheck(cfg *sandbox.ImageConfig, c *instructions.HealthCheckCommand) error {
	h := c.Health
	if h == nil || len(h.Test) == 0 || strings.EqualFold(h.Test[0], "NONE") {
		cfg.Healthcheck = nil
		return nil
	}
	cfg.Healthcheck = &sandbox.Healthcheck{
		Test:        slices.Clone(h.Test),
		Interval:    h.Interval,
		Timeout:     h.Timeout,
		StartPeriod: h.StartPeriod,
		Retries:     h.Retries,
	}
	return nil
}

// checkSignal accepts what docker does: a number or a name with or
// without SIG.
func checkSignal(s string) error {
	if n, err := strconv.Atoi(s); err == nil {
		if n <= 0 || n > 64 {
			return fmt.Errorf("invalid signal %q", s)
		}
		return nil
	}
	name := strings.ToUpper(s)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	if unix.SignalNum(name) == 0 && !strings.HasPrefix(name, "SIGRTM") {
		return fmt.Errorf("invalid signal %q", s)
	}
	return nil
}

// workdir sets the working directory and creates it when the image does
// not have it (as BuildKit does), as a layer of one directory.
func (bd *build) workdir(ctx context.Context, st *stageState, c *instructions.WorkdirCommand) error {
	start := time.Now()
	dir := path.Clean(st.absPath(c.Path))
	st.cfg.WorkingDir = dir
	view := newRootView(st.tmpl)
	if _, _, err := view.resolve(dir, true); err == nil || st.tmpl.Kind == sandbox.TemplateHost {
		bd.result(st.stateKey(), start)
		return nil
	}
	key := st.stateKey("WORKDIR", dir)
	return bd.layer(ctx, st, key, func() (io.ReadCloser, error) {
		return bd.tarFile(func(lw *layerWriter) error {
			target, err := resolveDest(lw.view, dir)
			if err != nil {
				return err
			}
			return lw.add(target, fileMeta{mode: 0o755 | dirMode, mtime: time.Unix(0, 0)}, nil)
		}, view, nil)
	})
}
