package builder

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"

	"github.com/agentbox/agentbox/internal/sandbox"
)

const dirMode = fs.ModeDir

// Limits of one COPY/ADD layer.
var defaultCopyLimits = copyLimits{MaxEntries: 1_000_000, MaxBytes: 64 << 30}

// tempLayer is a layer tar in a temporary file, removed on Close.
type tempLayer struct{ *os.File }

func (t tempLayer) Close() error {
	err := t.File.Close()
	os.Remove(t.File.Name())
	return err
}

// tarFile writes a layer with fn into a temporary file and returns it
// rewound; digest receives the content hash when not nil.
func (bd *build) tarFile(fn func(*layerWriter) error, view *rootView, digest *string) (io.ReadCloser, error) {
	f, err := os.CreateTemp(bd.tmpDir, "layer-*.tar")
	if err != nil {
		return nil, err
	}
	t := tempLayer{f}
	lw := newLayerWriter(f, view, defaultCopyLimits)
	if err := fn(lw); err != nil {
		t.Close()
		return nil, err
	}
	if err := lw.close(); err != nil {
		t.Close()
		return nil, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		t.Close()
		return nil, err
	}
	if digest != nil {
		*digest = lw.digest()
	}
	return t, nil
}

// refTemplate resolves --from / from=: an earlier stage (name or index)
// or an image.
func (bd *build) refTemplate(ctx context.Context, st *stageState, ref string) (sandbox.Template, error) {
	if j, ok := bd.df.stageIndex(ref, st.idx); ok {
		s, err := bd.stage(ctx, j)
		if err != nil {
			return sandbox.Template{}, err
		}
		return s.tmpl, nil
	}
	if strings.EqualFold(ref, "scratch") {
		return sandbox.Template{}, fmt.Errorf("--from=scratch has no files")
	}
	t, err := bd.image(ctx, ref)
	if err != nil {
		return sandbox.Template{}, fmt.Errorf("--from=%s: %w", ref, err)
	}
	return t, nil
}

func templateKey(t sandbox.Template) string {
	return strings.Join([]string{t.Kind, t.Ref, t.Digest, t.Dir, strings.Join(t.Layers, ":")}, "|")
}

type copyArgs struct {
	cmd          string
	sd           instructions.SourcesAndDest
	from         string
	chown, chmod string
	extract      bool
}

// copy runs COPY or ADD: the layer is written from the context (or
// --from) without a sandbox; its content hash is part of the cache key.
func (bd *build) copy(ctx context.Context, st *stageState, a copyArgs) error {
	op := copyOp{cmd: a.cmd, sources: a.sd.SourcePaths, dest: st.absPath(a.sd.DestPath), extract: a.extract}
	fromKey := "context"
	if a.from != "" {
		from, _, err := bd.lex.ProcessWord(a.from, st.vars.getter())
		if err != nil {
			return err
		}
		t, err := bd.refTemplate(ctx, st, from)
		if err != nil {
			return err
		}
		op.src, fromKey = viewSource{newRootView(t)}, templateKey(t)
	} else {
		if bd.ctxSrc == nil {
			if bd.opts.ContextDir == "" {
				return errors.New("no build context")
			}
			cs, err := newContextSource(bd.opts.ContextDir)
			if err != nil {
				return err
			}
			bd.ctxSrc = cs
		}
		op.src = bd.ctxSrc
	}
	view := newRootView(st.tmpl)
	if a.chown != "" {
		o, err := resolveChown(view, a.chown)
		if err != nil {
			return err
		}
		op.chown = &o
	}
	mode, err := parseChmod(a.chmod)
	if err != nil {
		return err
	}
	op.chmod = mode
	var digest string
	layer, err := bd.tarFile(func(lw *layerWriter) error { return writeCopy(lw, op) }, view, &digest)
	if err != nil {
		return err
	}
	defer layer.Close()
	desc, _ := json.Marshal([]any{a.cmd, op.sources, op.dest, fromKey, op.chown, a.chmod, op.extract})
	key := st.stateKey(string(desc), digest)
	return bd.layer(ctx, st, key, func() (io.ReadCloser, error) { return io.NopCloser(layer), nil })
}

// run executes RUN through the Runner.
func (bd *build) run(ctx context.Context, st *stageState, c *instructions.RunCommand) error {
	args := st.cmdline(c.ShellDependantCmdLine)
	if len(args) == 0 {
		return errors.New("RUN needs a command")
	}
	step := RunStep{
		Args:       args,
		Env:        st.vars.runEnv(bd.proxies),
		WorkingDir: st.cfg.WorkingDir,
		User:       st.cfg.User,
		Network:    instructions.GetNetwork(c),
	}
	if step.WorkingDir == "" {
		step.WorkingDir = "/"
	}
	mountKey, err := bd.mounts(ctx, st, c, &step)
	if err != nil {
		return err
	}
	argv, _ := json.Marshal(args)
	key := st.stateKey("RUN", string(argv), step.Network, mountKey)
	return bd.layer(ctx, st, key, func() (io.ReadCloser, error) {
		step.Started = func(id string) {
			bd.rep.event(Event{Type: EventRunning, Step: bd.step, Sandbox: id})
		}
		diff, err := bd.b.runner.Run(ctx, st.tmpl, step, outputWriter{bd.rep})
		if err != nil {
			return nil, fmt.Errorf("the command %s failed: %w", strings.Join(args, " "), serverFault(err))
		}
		return diff, nil
	})
}

// mounts fills step's mounts from RUN --mount and returns their part of
// the cache key (never a secret's value).
func (bd *build) mounts(ctx context.Context, st *stageState, c *instructions.RunCommand, step *RunStep) (string, error) {
	var key []string
	for _, m := range instructions.GetMounts(c) {
		target := ""
		if m.Target != "" {
			target = path.Clean(st.absPath(m.Target))
		}
		switch m.Type {
		case instructions.MountTypeSecret:
			s, ok, err := bd.secret(m, target)
			if err != nil {
				return "", err
			}
			if ok {
				step.Secrets = append(step.Secrets, s)
				key = append(key, fmt.Sprintf("secret %q %q %q", s.ID, s.Target, s.Env))
			}
		case instructions.MountTypeCache:
			if target == "" {
				return "", errors.New("--mount=type=cache needs a target")
			}
			cm := CacheMount{ID: m.CacheID, Target: target, ReadOnly: m.ReadOnly, Sharing: string(m.CacheSharing), Mode: 0o755}
			if cm.ID == "" {
				cm.ID = target
			}
			if cm.Sharing == "" {
				cm.Sharing = string(instructions.MountSharingShared)
			}
			setFileInfo(m, &cm.Mode, &cm.UID, &cm.GID)
			step.Caches = append(step.Caches, cm)
			key = append(key, fmt.Sprintf("cache %q %q %v %s %o %d %d", cm.ID, cm.Target, cm.ReadOnly, cm.Sharing, cm.Mode, cm.UID, cm.GID))
		case instructions.MountTypeBind:
			if target == "" {
				return "", errors.New("--mount=type=bind needs a target")
			}
			t, err := bd.refTemplate(ctx, st, m.From)
			if err != nil {
				return "", err
			}
			src := path.Clean("/" + m.Source)
			step.Binds = append(step.Binds, BindMount{From: t, Source: src, Target: target, ReadWrite: !m.ReadOnly})
			key = append(key, fmt.Sprintf("bind %q %q %q %v", templateKey(t), src, target, m.ReadOnly))
		case instructions.MountTypeTmpfs:
			if target == "" {
				return "", errors.New("--mount=type=tmpfs needs a target")
			}
			step.Tmpfs = append(step.Tmpfs, TmpfsMount{Target: target, Size: m.SizeLimit})
			key = append(key, fmt.Sprintf("tmpfs %q %d", target, m.SizeLimit))
		default:
			return "", fmt.Errorf("--mount=type=%s is not supported", m.Type)
		}
	}
	return strings.Join(key, "\x00"), nil
}

// secret resolves a secret mount: a missing secret is skipped unless
// required, as in BuildKit.
func (bd *build) secret(m *instructions.Mount, target string) (SecretMount, bool, error) {
	id := m.CacheID
	if id == "" {
		id = m.Source
	}
	if id == "" && target != "" {
		id = path.Base(target)
	}
	if id == "" || id == "." || id == ".." || strings.ContainsAny(id, "/\x00") {
		return SecretMount{}, false, fmt.Errorf("invalid secret id %q", id)
	}
	data, ok := bd.opts.Secrets[id]
	if !ok {
		if m.Required {
			return SecretMount{}, false, fmt.Errorf("secret %q is required but was not given (--secret id=%s,...)", id, id)
		}
		return SecretMount{}, false, nil
	}
	s := SecretMount{ID: id, Target: target, Data: data, Mode: 0o400}
	if m.Env != nil {
		s.Env = *m.Env
	}
	if s.Target == "" && s.Env == "" {
		s.Target = "/run/secrets/" + id
	}
	setFileInfo(m, &s.Mode, &s.UID, &s.GID)
	return s, true, nil
}

func setFileInfo(m *instructions.Mount, mode, uid, gid *uint32) {
	if m.Mode != nil {
		*mode = uint32(*m.Mode)
	}
	if m.UID != nil {
		*uid = uint32(*m.UID)
	}
	if m.GID != nil {
		*gid = uint32(*m.GID)
	}
}
