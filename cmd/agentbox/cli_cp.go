package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/client"
)

// Progress appears for transfers longer than progressDelay.
const (
	progressDelay = time.Second
	progressEvery = 250 * time.Millisecond
)

// cpPath is one side of cp: a sandbox path (ID set) or a local path
// ("-" for stdin/stdout).
type cpPath struct {
	id, path string
}

func (p cpPath) remote() bool { return p.id != "" }

func (p cpPath) String() string {
	if p.remote() {
		return p.id + ":" + p.path
	}
	return p.path
}

// remoteArg matches "ID:path" with a well-formed sandbox id. A local path
// containing ':' can be written "./name:x".
var remoteArg = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^([a-z0-9][a-z0-9-]{0,62}):(.*)$`) })

func parseCpPath(s string) cpPath {
	if m := remoteArg().FindStringSubmatch(s); m != nil {
		return cpPath{id: m[1], path: m[2]}
	}
	return cpPath{path: s}
}

func newCpCmd() *cobra.Command {
	var quiet bool
	cmd := &cobra.Command{
		Use:   "cp [flags] SRC DST",
		Short: "Copy a file into or out of a sandbox",
		Long: `Copies one file between this machine and a sandbox, streaming it. One side
is ID:PATH (relative paths are relative to the sandbox user's home), the
other a local path, or - for standard input or output.

Copying into a directory (an existing one, or a path ending in /) keeps
the file's name. Directories themselves are not copied yet. A progress line
appears on stderr when it is a terminal and the copy takes over a second.`,
		Example: `  agentbox cp data.csv $ID:/workspace/
  agentbox cp $ID:/workspace/report.pdf .
  tar cz src | agentbox cp - $ID:/workspace/src.tgz`,
		ValidArgsFunction: completeCp,
		RunE: clientRunE(cobra.ExactArgs(2), func(ctx context.Context, x *cli, args []string) error {
			src, dst := parseCpPath(args[0]), parseCpPath(args[1])
			if src.remote() == dst.remote() {
				return usageErrorf("cp: exactly one of SRC and DST must be a sandbox path ID:PATH")
			}
			showProgress := !quiet && isTerminal(x.errOut)
			var n int64
			var err error
			if dst.remote() {
				n, err = upload(ctx, x, src.path, dst, showProgress)
			} else {
				n, err = download(ctx, x, src, dst.path, showProgress)
			}
			if err != nil || !x.json {
				return err
			}
			return x.printJSON(map[string]any{"source": src.String(), "destination": dst.String(), "bytes": n})
		}),
	}
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "no progress line")
	return cmd
}

// upload copies local (a file or "-") to dst and returns the bytes sent.
func upload(ctx context.Context, x *cli, local string, dst cpPath, showProgress bool) (int64, error) {
	var r io.Reader
	size := int64(-1)
	name := ""
	if local == "-" {
		r = x.in
	} else {
		f, err := os.Open(local)
		if err != nil {
			return 0, err
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return 0, err
		}
		if st.IsDir() {
			return 0, fmt.Errorf("%s is a directory: copying directories is not supported (pack it: tar c %s | agentbox cp - ID:/path.tar)", local, local)
		}
		r, size, name = f, st.Size(), filepath.Base(local)
	}
	target, err := uploadTarget(ctx, x.c, dst, name)
	if err != nil {
		return 0, err
	}
	meter := startProgress(x.errOut, size, showProgress, progressDelay, progressEvery)
	e, err := x.c.Upload(ctx, dst.id, target, r, size, meter.set)
	meter.finish()
	if err != nil {
		return 0, err
	}
	return e.Size, nil
}

// uploadTarget resolves where in the sandbox a file named name goes: into
// the directory dst names (a trailing "/", an empty path, or an existing
// directory), else at dst itself.
func uploadTarget(ctx context.Context, c *client.Client, dst cpPath, name string) (string, error) {
	p := dst.path
	intoDir := p == "" || strings.HasSuffix(p, "/")
	if !intoDir {
		e, err := c.Stat(ctx, dst.id, p)
		switch {
		case client.IsNotFound(err):
		case err != nil:
			return "", err
		default:
			intoDir = e.IsDir()
		}
	}
	if !intoDir {
		return p, nil
	}
	if name == "" {
		return "", usageErrorf("cp: %s is a directory: name the file to write from stdin", dst)
	}
	if p == "" {
		return name, nil // relative: the user's home
	}
	return path.Join(p, name), nil
}

// download copies src to local (a file, a directory, or "-") and returns
// the bytes received. A local file is written under a temporary name and
// renamed at the end, so a failed copy leaves no partial file.
func download(ctx context.Context, x *cli, src cpPath, local string, showProgress bool) (int64, error) {
	if src.path == "" || strings.HasSuffix(src.path, "/") {
		return 0, usageErrorf("cp: %s: name a file to copy", src)
	}
	rc, size, err := x.c.Download(ctx, src.id, src.path)
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	meter := startProgress(x.errOut, size, showProgress, progressDelay, progressEvery)
	defer meter.finish()
	body := io.TeeReader(rc, progressWriter{meter})

	if local == "-" {
		return io.Copy(x.out, body)
	}
	if st, err := os.Stat(local); err == nil && st.IsDir() {
		local = filepath.Join(local, path.Base(src.path))
	}
	tmp, err := os.CreateTemp(filepath.Dir(local), "."+filepath.Base(local)+".*.part")
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(tmp, body)
	err = errors.Join(err, tmp.Chmod(0o644), tmp.Close())
	if err == nil {
		err = os.Rename(tmp.Name(), local)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return 0, err
	}
	return n, nil
}

// progressWriter feeds a meter from a TeeReader.
type progressWriter struct{ meter *progressMeter }

func (w progressWriter) Write(p []byte) (int, error) {
	w.meter.n.Add(int64(len(p)))
	return len(p), nil
}
