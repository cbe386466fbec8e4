package main

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/client"
)

// maxSecretFile bounds one --secret's file.
const maxSecretFile = 1 << 20

func newTemplateBuildCmd() *cobra.Command {
	var (
		tags, buildArgs, secrets []string
		file, target             string
		noCache                  bool
	)
	cmd := &cobra.Command{
		Use:   "build -t NAME[:TAG] [-f Dockerfile] [--build-arg K=V] [--secret id=ID,src=FILE|env=VAR] [--target T] [--no-cache] CONTEXT",
		Short: "Build a template from a Dockerfile (operator only)",
		Long: `Build a Dockerfile on the server: RUN steps run in the server's sandboxes
(root in a user namespace, egress network), every step is cached, and the
result is a template. CONTEXT is a directory; it is sent as a tar stream
without what its .dockerignore excludes. Secrets (RUN --mount=type=secret)
are read here and sent in the request body; they reach no layer.`,
		Example: `  agentbox template build -t myapp:1 .
  agentbox template build -t base --secret id=apt-sources,src=/etc/apt/sources.list.d/debian.sources templates/base`,
		RunE: clientRunE(cobra.ExactArgs(1), func(ctx context.Context, x *cli, args []string) error {
			req := client.BuildRequest{Tags: tags, Dockerfile: file, Target: target, NoCache: noCache}
			if len(tags) == 0 {
				return usageErrorf("a template name is required: -t NAME[:TAG]")
			}
			var err error
			if req.BuildArgs, err = parseBuildArgs(buildArgs); err != nil {
				return err
			}
			if req.Secrets, err = parseSecrets(secrets); err != nil {
				return err
			}
			dir := args[0]
			if st, err := os.Stat(dir); err != nil || !st.IsDir() {
				return usageErrorf("build context %s: not a directory", dir)
			}
			dockerfile := file
			if dockerfile == "" {
				dockerfile = "Dockerfile"
			}
			pr, pw := io.Pipe()
			go func() { pw.CloseWithError(tarContext(dir, dockerfile, pw)) }()
			defer pr.Close()
			p := buildPrinter{x: x, start: time.Now()}
			t, err := x.c.BuildTemplate(ctx, req, pr, p.event)
			if err != nil {
				return err
			}
			if x.json {
				return x.printJSON(t)
			}
			return nil
		}),
	}
	f := cmd.Flags()
	f.StringArrayVarP(&tags, "tag", "t", nil, "name of the result, NAME[:TAG] (repeatable)")
	f.StringVarP(&file, "file", "f", "", "the Dockerfile's path in the context (default Dockerfile)")
	f.StringArrayVar(&buildArgs, "build-arg", nil, "a build arg K=V (K alone takes it from the environment)")
	f.StringArrayVar(&secrets, "secret", nil, "a build secret: id=ID,src=FILE or id=ID,env=VAR")
	f.StringVar(&target, "target", "", "build this stage")
	f.BoolVar(&noCache, "no-cache", false, "run every step again")
	return cmd
}

func parseBuildArgs(list []string) (map[string]string, error) {
	out := map[string]string{}
	for _, a := range list {
		k, v, ok := strings.Cut(a, "=")
		if !ok {
			val, set := os.LookupEnv(k)
			if !set {
				continue // docker skips an unset K
			}
			v = val
		}
		if k == "" {
			return nil, usageErrorf("--build-arg %q: want K=V", a)
		}
		out[k] = v
	}
	return out, nil
}

// parseSecrets reads --secret id=ID,src=FILE|env=VAR (docker's syntax;
// source= and type= accepted too).
func parseSecrets(list []string) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, s := range list {
		var id, src, env string
		for _, kv := range strings.Split(s, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch strings.TrimSpace(k) {
			case "id":
				id = v
			case "src", "source":
				src = v
			case "env":
				env = v
			case "type":
				if v != "file" && v != "env" {
					return nil, usageErrorf("--secret %q: type must be file or env", s)
				}
			default:
				return nil, usageErrorf("--secret %q: unknown key %q (want id=ID,src=FILE or id=ID,env=VAR)", s, k)
			}
		}
		if id == "" {
			id = filepath.Base(src)
			if src == "" {
				id = env
			}
		}
		switch {
		case id == "" || (src == "" && env == ""):
			return nil, usageErrorf("--secret %q: want id=ID,src=FILE or id=ID,env=VAR", s)
		case src != "":
			f, err := os.Open(src)
			if err != nil {
				return nil, fmt.Errorf("--secret %s: %w", id, err)
			}
			data, err := io.ReadAll(io.LimitReader(f, maxSecretFile+1))
			f.Close()
			if err != nil {
				return nil, fmt.Errorf("--secret %s: %w", id, err)
			}
			if len(data) > maxSecretFile {
				return nil, fmt.Errorf("--secret %s: %s is over %d KiB", id, src, maxSecretFile>>10)
			}
			out[id] = data
		default:
			v, ok := os.LookupEnv(env)
			if !ok {
				return nil, fmt.Errorf("--secret %s: environment variable %s is not set", id, env)
			}
			out[id] = []byte(v)
		}
	}
	return out, nil
}

// tarContext writes dir as a tar stream, leaving out what .dockerignore
// excludes (the Dockerfile and .dockerignore always go: the server needs
// them and applies .dockerignore again). Owners are not sent: context
// files are root's in the image unless COPY --chown.
func tarContext(dir, dockerfile string, w io.Writer) error {
	var pm *patternmatcher.PatternMatcher
	if f, err := os.Open(filepath.Join(dir, ".dockerignore")); err == nil {
		patterns, err := ignorefile.ReadAll(f)
		f.Close()
		if err != nil {
			return fmt.Errorf(".dockerignore: %w", err)
		}
		if pm, err = patternmatcher.New(patterns); err != nil {
			return fmt.Errorf(".dockerignore: %w", err)
		}
	}
	keep := map[string]bool{filepath.ToSlash(filepath.Clean(dockerfile)): true, ".dockerignore": true}
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		if pm != nil && !keep[rel] {
			ignored, err := pm.MatchesOrParentMatches(rel)
			if err != nil {
				return err
			}
			// An ignored directory is still walked when a "!pattern" may
			// re-include something below it.
			if ignored && !(d.IsDir() && pm.Exclusions()) {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			if ignored {
				return nil // the directory itself; its kept children carry it
			}
		}
		return addTarEntry(tw, p, rel)
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

func addTarEntry(tw *tar.Writer, p, rel string) error {
	fi, err := os.Lstat(p)
	if err != nil {
		return err
	}
	link := ""
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		if link, err = os.Readlink(p); err != nil {
			return err
		}
	case fi.Mode().IsRegular(), fi.IsDir():
	default:
		return nil // sockets, fifos, devices: nothing a build copies
	}
	h, err := tar.FileInfoHeader(fi, link)
	if err != nil {
		return err
	}
	h.Name = rel
	if fi.IsDir() {
		h.Name += "/"
	}
	h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "", ""
	h.Format = tar.FormatPAX
	h.AccessTime, h.ChangeTime = time.Time{}, time.Time{}
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return nil
	}
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	n, err := io.Copy(tw, f)
	if err == nil && n != h.Size {
		err = errors.New("file changed while being sent")
	}
	if err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	return nil
}

// buildPrinter prints build events as docker build does; the build log
// goes to stderr with --json (stdout is the result).
type buildPrinter struct {
	x     *cli
	start time.Time
}

func (p buildPrinter) event(ev client.BuildEvent) {
	out := p.x.out
	if p.x.json {
		out = p.x.errOut
	}
	switch ev.Type {
	case "step":
		fmt.Fprintf(out, "Step %d/%d : %s\n", ev.Step, ev.Steps, ev.Instruction)
	case "cached":
		fmt.Fprintln(out, " ---> Using cache")
	case "running":
		fmt.Fprintf(out, " ---> Running in %s\n", ev.Sandbox)
	case "output":
		_, _ = io.WriteString(out, ev.Output)
	case "result":
		fmt.Fprintf(out, " ---> %s (%s)\n", ev.ID, (time.Duration(ev.DurationMS) * time.Millisecond).String())
	case "warning":
		fmt.Fprintf(out, "[Warning] %s\n", ev.Message)
	case "done":
		fmt.Fprintf(out, "Successfully built %s\n", shortDigest(ev.Digest))
		for _, t := range ev.Tags {
			fmt.Fprintf(out, "Successfully tagged %s\n", t)
		}
		fmt.Fprintf(out, "Build took %s\n", time.Since(p.start).Round(10*time.Millisecond))
	case "error":
		if ev.Line > 0 {
			fmt.Fprintf(p.x.errOut, "ERROR (line %d): %s\n", ev.Line, ev.Message)
		}
	}
}

func shortDigest(d string) string {
	d = strings.TrimPrefix(d, "sha256:")
	if len(d) > 12 {
		return d[:12]
	}
	return d
}
