// Package bootstrap builds Debian root filesystem tarballs with mmdebstrap,
// so that a template (and a Dockerfile's `FROM debian:bookworm`) needs no
// registry: only the Debian mirror the host's own apt already reaches.
//
// Everything about how to reach Debian comes from the host's apt (its
// effective configuration, read with apt-config): the Debian entries of its
// sources, re-pointed at the requested suite; the Acquire options that say
// how to fetch (proxies, snapshot mirrors' Check-Valid-Until, ...); its
// auth.conf credentials. Options that carry no secret stay in the image
// (apt inside behaves like the host's); credentials are used during the
// bootstrap and removed before the tarball is written.
//
// mmdebstrap runs in its root mode (the daemon is root; unshare mode would
// need /etc/subuid ranges for root, which hosts and CI runners rarely
// have), inside a private mount namespace and a pid namespace of its own
// (util-linux unshare), so the /proc, /sys and /dev mounts it makes in the
// chroot never reach the host's mount table and maintainer scripts cannot
// leave processes behind, whatever happens to the run.
//
// Results are cached in a directory outside any checkout, keyed by suite,
// variant, packages, sources and options: a second call returns the cached
// tarball at once.
package bootstrap

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
)

// Options describe one bootstrap.
type Options struct {
	// Image is the Debian image to make: "debian:bookworm", "debian:12".
	Image string
	// Include are extra Debian packages installed at bootstrap time.
	Include []string
	// Variant is mmdebstrap's package set ("" = minbase: Essential plus
	// apt, what Docker's debian images hold).
	Variant string
	// CacheDir holds the tarballs (required; outside any checkout).
	CacheDir string
	// Keep is how many cached tarballs stay (least recently used go first;
	// 0 = DefaultKeep).
	Keep   int
	Logger *slog.Logger
	// Tool is the mmdebstrap program ("" = mmdebstrap from PATH).
	Tool string
}

// DefaultKeep is how many tarballs the cache keeps by default.
const DefaultKeep = 4

// MaxInclude bounds the packages of one bootstrap.
const MaxInclude = 200

// cacheVersion changes when the way tarballs are made changes, so old
// cache entries are not mistaken for new ones.
const cacheVersion = 1

var (
	// Debian package names (Debian policy 5.6.1); no "/" so never a path,
	// no "," or "?" so never an mmdebstrap list or apt pattern.
	pkgName   = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]{0,99}$`) })
	variants  = []string{"minbase", "buildd", "required", "important", "standard"}
	versionOf = map[string]string{"10": "buster", "11": "bullseye", "12": "bookworm", "13": "trixie", "14": "forky"}
)

// ParseImage returns the Debian suite of an image reference "debian:TAG"
// (TAG a release name, a symbolic name or a major version number).
func ParseImage(ref string) (string, error) {
	repo, tag, ok := strings.Cut(ref, ":")
	switch repo {
	case "debian", "library/debian", "docker.io/library/debian":
	default:
		return "", fmt.Errorf("bootstrap makes Debian images: %q is not debian:SUITE", ref)
	}
	if !ok || tag == "" {
		return "", fmt.Errorf("bootstrap %q: name the suite, e.g. debian:bookworm", ref)
	}
	if s, ok := versionOf[tag]; ok {
		tag = s
	}
	if !debianSuites[tag] {
		return "", fmt.Errorf("bootstrap %q: unknown Debian suite %q", ref, tag)
	}
	return tag, nil
}

// CheckInclude validates package names; it returns them sorted, without
// duplicates.
func CheckInclude(pkgs []string) ([]string, error) {
	if len(pkgs) > MaxInclude {
		return nil, fmt.Errorf("at most %d packages can be included, not %d", MaxInclude, len(pkgs))
	}
	out := make([]string, 0, len(pkgs))
	for _, p := range pkgs {
		if !pkgName().MatchString(p) {
			return nil, fmt.Errorf("%q is not a Debian package name", p)
		}
		out = append(out, p)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// plan is one resolved bootstrap.
type plan struct {
	suite, variant string
	include        []string
	host           hostApt
	sources        []source
	key            string
}

// Bootstrap returns the path of a root filesystem tarball for opts.Image,
// building it with mmdebstrap unless the cache has it. Progress goes to out.
func Bootstrap(ctx context.Context, opts Options, out io.Writer) (string, error) {
	if out == nil {
		out = io.Discard
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	p, err := resolve(ctx, opts)
	if err != nil {
		return "", err
	}
	if opts.CacheDir == "" {
		return "", errors.New("bootstrap: no cache directory")
	}
	if err := os.MkdirAll(filepath.Join(opts.CacheDir, "tmp"), 0o700); err != nil {
		return "", fmt.Errorf("bootstrap cache: %w", err)
	}
	final := filepath.Join(opts.CacheDir, fmt.Sprintf("debian-%s-%s.tar", p.suite, p.key[:16]))
	unlock, err := lockFile(ctx, final+".lock")
	if err != nil {
		return "", err
	}
	defer unlock()
	if fi, err := os.Stat(final); err == nil && fi.Mode().IsRegular() {
		now := time.Now()
		_ = os.Chtimes(final, now, now) // recently used: pruned last
		fmt.Fprintf(out, "debian:%s (%s): cached %s\n", p.suite, p.variant, filepath.Base(final))
		return final, nil
	}
	removeStale(opts.CacheDir, opts.Logger)
	start := time.Now()
	if err := build(ctx, opts, p, final, out); err != nil {
		return "", err
	}
	opts.Logger.Info("bootstrapped", "suite", p.suite, "variant", p.variant, "include", p.include,
		"tarball", final, "took", time.Since(start).Round(time.Millisecond))
	prune(opts.CacheDir, final, opts.Keep, opts.Logger)
	return final, nil
}

// resolve validates opts and reads the host's apt into a plan.
func resolve(ctx context.Context, opts Options) (plan, error) {
	var p plan
	var err error
	if p.suite, err = ParseImage(opts.Image); err != nil {
		return p, err
	}
	if p.include, err = CheckInclude(opts.Include); err != nil {
		return p, fmt.Errorf("bootstrap: %w", err)
	}
	p.variant = opts.Variant
	if p.variant == "" {
		p.variant = "minbase"
	}
	if !slices.Contains(variants, p.variant) {
		return p, fmt.Errorf("bootstrap: variant %q is not one of %s", p.variant, strings.Join(variants, ", "))
	}
	if p.host, err = readHostApt(ctx); err != nil {
		return p, err
	}
	p.sources = debianSourcesFor(p.host.Sources, p.suite)
	if len(p.sources) == 0 {
		return p, errors.New("bootstrap: the host's apt sources name no Debian repository " +
			"(bootstrap reaches Debian the way the host's apt does; add a Debian entry to /etc/apt/sources.list.d)")
	}
	p.key = cacheKey(p)
	return p, nil
}

// cacheKey hashes everything that decides a tarball's content. Credentials
// are left out: new ones fetch the same packages.
func cacheKey(p plan) string {
	b, _ := json.Marshal(map[string]any{
		"v": cacheVersion, "suite": p.suite, "variant": p.variant, "include": p.include,
		"sources": sourceLines(p.sources, true), "options": p.host.Options, "arch": runtime.GOARCH,
	})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// build runs mmdebstrap into a work directory and moves the tarball to
// final once it is complete.
func build(ctx context.Context, opts Options, p plan, final string, out io.Writer) (err error) {
	work, release, err := newWorkDir(opts.CacheDir)
	if err != nil {
		return err
	}
	defer func() {
		release()
		cleanupWork(work, opts.Logger)
	}()
	args, err := mmdebstrapArgs(opts, p, work)
	if err != nil {
		return err
	}
	tail := &tailWriter{max: 4 << 10}
	w := io.MultiWriter(out, tail)
	cmd := exec.CommandContext(ctx, "unshare", args...)
	cmd.Dir = work
	cmd.Env = append(filteredEnv(), "TMPDIR="+work)
	cmd.Stdout, cmd.Stderr = w, w
	cmd.WaitDelay = 30 * time.Second
	fmt.Fprintf(out, "debian:%s (%s): bootstrapping with mmdebstrap from the host's apt sources\n", p.suite, p.variant)
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("bootstrap debian:%s: %w", p.suite, ctx.Err())
		}
		return fmt.Errorf("bootstrap debian:%s: mmdebstrap: %w\n%s", p.suite, err, tail.String())
	}
	tarball := filepath.Join(work, "rootfs.tar")
	if err := syncFile(tarball); err != nil {
		return fmt.Errorf("bootstrap debian:%s: %w", p.suite, err)
	}
	if err := os.Rename(tarball, final); err != nil {
		return fmt.Errorf("bootstrap debian:%s: store tarball: %w", p.suite, err)
	}
	return nil
}

// mmdebstrapArgs are unshare's arguments: the namespaces, then mmdebstrap's
// command line. It writes the files the hooks copy into work.
func mmdebstrapArgs(opts Options, p plan, work string) ([]string, error) {
	tool := opts.Tool
	if tool == "" {
		tool = "mmdebstrap"
	}
	args := []string{"--mount", "--propagation", "private", "--pid", "--fork", "--kill-child", "--",
		tool, "--mode=root", "--variant=" + p.variant, "--format=tar"}
	for _, o := range p.host.Options {
		args = append(args, "--aptopt="+o)
	}
	if len(p.include) > 0 {
		args = append(args, "--include="+strings.Join(p.include, ","))
	}
	hooks, err := writeHookFiles(p, work)
	if err != nil {
		return nil, err
	}
	args = append(args, hooks...)
	args = append(args, p.suite, filepath.Join(work, "rootfs.tar"))
	// The sources as the host wrote them (credentials included): apt needs
	// them to fetch; the image gets the redacted copy from a hook.
	return append(args, sourceLines(p.sources, false)...), nil
}

// Paths inside the chroot of the files that live only during the run.
const (
	chrootAuth   = "/etc/apt/auth.conf.d/90agentbox-host.conf"
	chrootSecret = "/etc/apt/apt.conf.d/00agentbox-host" //nolint:gosec // G101: a path, not a credential
)

// writeHookFiles writes what the hooks copy in and returns the hook
// options: credentials reach apt from the setup hook and leave before the
// tarball is made; the image keeps the redacted sources and no host
// resolv.conf or hostname (the runtime gives each sandbox its own).
func writeHookFiles(p plan, work string) ([]string, error) {
	write := func(name string, data []byte) (string, error) {
		path := filepath.Join(work, name)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return "", fmt.Errorf("bootstrap: %w", err)
		}
		return path, nil
	}
	src, err := write("sources.list", []byte(strings.Join(sourceLines(p.sources, true), "\n")+"\n"))
	if err != nil {
		return nil, err
	}
	var hooks []string
	var setup []string
	if len(p.host.Auth) > 0 {
		f, err := write("auth.conf", p.host.Auth)
		if err != nil {
			return nil, err
		}
		setup = append(setup, `mkdir -p "$1/etc/apt/auth.conf.d"`, "cp "+shellQuote(f)+` "$1`+chrootAuth+`"`)
	}
	if len(p.host.Secret) > 0 {
		f, err := write("secret.conf", []byte(strings.Join(p.host.Secret, "\n")+"\n"))
		if err != nil {
			return nil, err
		}
		setup = append(setup, "cp "+shellQuote(f)+` "$1`+chrootSecret+`"`)
	}
	if len(setup) > 0 {
		hooks = append(hooks, "--setup-hook="+strings.Join(setup, " && "))
	}
	hooks = append(hooks, "--customize-hook="+strings.Join([]string{
		`rm -f "$1` + chrootAuth + `" "$1` + chrootSecret + `" "$1/etc/resolv.conf" "$1/etc/hostname"`,
		"cp " + shellQuote(src) + ` "$1/etc/apt/sources.list"`,
		`chmod 0644 "$1/etc/apt/sources.list"`,
	}, " && "))
	return hooks, nil
}

// shellQuote quotes s for sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// filteredEnv is the environment mmdebstrap runs with: the daemon's, minus
// apt and temporary-directory settings that would redirect it.
func filteredEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "TMPDIR" || k == "APT_CONFIG" {
			continue
		}
		env = append(env, kv)
	}
	return env
}

func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("mmdebstrap wrote no tarball: %w", err)
	}
	defer f.Close()
	return f.Sync()
}

// tailWriter keeps the last max bytes written, for error messages.
type tailWriter struct {
	max int
	buf []byte
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailWriter) String() string { return strings.TrimSpace(string(t.buf)) }
