package main

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/units"
)

// newTemplateCmd is `agentbox template`: the server's templates, managed
// through the daemon (which owns the store), as docker talks to dockerd.
func newTemplateCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "template",
		Aliases: []string{"templates"},
		Short:   "Manage the server's templates (ls, pull, import, export, rm)",
	}
	cmd.AddCommand(newTemplateLsCmd(), newTemplatePullCmd(), newTemplateImportCmd(), newTemplateExportCmd(), newTemplateRmCmd(), newTemplateBootstrapCmd(), newTemplateBuildCmd())
	return cmd
}

func newTemplateLsCmd() *cobra.Command {
	return &cobra.Command{
		Use:               "ls",
		Aliases:           []string{"list"},
		Short:             "List the server's templates",
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE: clientRunE(cobra.NoArgs, func(ctx context.Context, x *cli, args []string) error {
			all, err := x.c.ListTemplates(ctx)
			if err != nil {
				return err
			}
			list := all.Templates
			if list == nil {
				list = []client.Template{}
			}
			if x.json {
				return x.printJSON(list)
			}
			if err := printTemplateTable(x.out, list, time.Now()); err != nil {
				return err
			}
			return printBuiltinStates(x.out, all.Builtin)
		}),
	}
}

// printTemplateTable writes the human table of template ls.
func printTemplateTable(w io.Writer, list []client.Template, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tTAG\tKIND\tSIZE\tLAYERS\tIN USE\tCREATED")
	for _, t := range list {
		created := "-"
		if !t.Created.IsZero() {
			created = shortDuration(now.Sub(t.Created)) + " ago"
		}
		size := "-"
		if t.Kind == "image" {
			size = units.FormatBytes(t.Size)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\n", t.Name, t.Tag, t.Kind, size, len(t.Layers), t.InUse, created)
	}
	return tw.Flush()
}

// printBuiltinStates says, below the table, which built-in templates are
// not ready yet: building (how long, of about how long, the step), failed
// (why) or not built, each with the command that builds it.
func printBuiltinStates(w io.Writer, list []client.BuiltinTemplate) error {
	var lines []string
	for _, b := range list {
		switch b.State {
		case "ready":
			continue
		case "building":
			l := fmt.Sprintf("  %s: building for %s", b.Name, shortDuration(time.Duration(b.ElapsedMS)*time.Millisecond))
			if b.EstimateMS > 0 {
				l += " of about " + shortDuration(time.Duration(b.EstimateMS)*time.Millisecond)
			}
			if b.Progress != "" {
				l += " (" + b.Progress + ")"
			}
			lines = append(lines, l)
		case "failed":
			lines = append(lines, fmt.Sprintf("  %s: failed: %s\n    build it with: %s", b.Name, b.Error, b.Command))
		default:
			lines = append(lines, fmt.Sprintf("  %s: not built; build it with: %s", b.Name, b.Command))
		}
	}
	if len(lines) == 0 {
		return nil
	}
	_, err := fmt.Fprintf(w, "\nBuilt-in templates not ready yet:\n%s\n", strings.Join(lines, "\n"))
	return err
}

func newTemplatePullCmd() *cobra.Command {
	var name, platform string
	cmd := &cobra.Command{
		Use:               "pull REF [-t NAME[:TAG]] [--platform os/arch]",
		Short:             "Pull an image from a registry into a template (server operator only)",
		Example:           "  agentbox template pull python:3.12-slim -t py312\n  agentbox template pull ghcr.io/org/app:1 --platform linux/arm64",
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE: clientRunE(cobra.ExactArgs(1), func(ctx context.Context, x *cli, args []string) error {
			pd := newPullDisplay(x.errOut, !x.json && isTerminal(x.errOut))
			t, err := x.c.PullTemplate(ctx, client.PullRequest{Image: args[0], Name: name, Platform: platform}, pd.update)
			pd.finish()
			if err != nil {
				return err
			}
			return x.reportTemplate(t)
		}),
	}
	cmd.Flags().StringVarP(&name, "tag", "t", "", "template NAME[:TAG] (default: the image reference)")
	cmd.Flags().StringVar(&platform, "platform", "", "os/arch[/variant] to pull (default: the server's)")
	return cmd
}

// reportTemplate prints the template a pull or an import made.
func (x *cli) reportTemplate(t *client.Template) error {
	if x.json {
		return x.printJSON(t)
	}
	fmt.Fprintf(x.out, "%s:%s  %s  %d layers  %s\n", t.Name, t.Tag, t.Digest, len(t.Layers), units.FormatBytes(t.Size))
	return nil
}

// pullDisplay shows a pull's layers, one line each, redrawn in place on a
// terminal; elsewhere it prints nothing (the final line says it all).
type pullDisplay struct {
	w       io.Writer
	enabled bool
	order   []string
	layers  map[string]client.TemplateProgress
	drawn   int
	last    time.Time
}

func newPullDisplay(w io.Writer, enabled bool) *pullDisplay {
	return &pullDisplay{w: w, enabled: enabled, layers: map[string]client.TemplateProgress{}}
}

// maxShownLayers bounds the display (and its memory) for huge images.
const maxShownLayers = 64

func (p *pullDisplay) update(ev client.TemplateProgress) {
	if !p.enabled {
		return
	}
	if _, ok := p.layers[ev.Layer]; !ok {
		if len(p.order) >= maxShownLayers {
			return
		}
		p.order = append(p.order, ev.Layer)
	}
	p.layers[ev.Layer] = ev
	if time.Since(p.last) < 100*time.Millisecond && ev.Status != "done" {
		return
	}
	p.last = time.Now()
	p.draw()
}

func (p *pullDisplay) draw() {
	if p.drawn > 0 {
		fmt.Fprintf(p.w, "\033[%dA", p.drawn)
	}
	for _, id := range p.order {
		fmt.Fprintf(p.w, "\r\033[K%s\n", progressLine(p.layers[id]))
	}
	p.drawn = len(p.order)
}

func (p *pullDisplay) finish() {
	if p.enabled && len(p.order) > 0 {
		p.draw()
	}
}

// progressLine formats one layer's progress.
func progressLine(ev client.TemplateProgress) string {
	id := strings.TrimPrefix(ev.Layer, "sha256:")
	if len(id) > 12 {
		id = id[:12]
	}
	s := fmt.Sprintf("%-12s  %-11s", id, ev.Status)
	if ev.Total > 0 && ev.Status != "done" && ev.Status != "cached" {
		s += fmt.Sprintf("  %s / %s", units.FormatBytes(ev.Current), units.FormatBytes(ev.Total))
	} else if ev.Current > 0 && ev.Status != "done" && ev.Status != "cached" {
		s += "  " + units.FormatBytes(ev.Current)
	}
	return s
}

func newTemplateImportCmd() *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   "import PATH -t NAME[:TAG]",
		Short: "Import a docker save tarball, an OCI archive or layout, or a root filesystem (tarball or directory) as a template (server operator only)",
		Example: "  docker save python:3.12 -o py.tar && agentbox template import py.tar -t py312\n" +
			"  agentbox template import ./rootfs -t mybase",
		RunE: clientRunE(cobra.ExactArgs(1), func(ctx context.Context, x *cli, args []string) error {
			if name == "" {
				return usageErrorf("-t NAME[:TAG] is required")
			}
			r, size, err := openImport(ctx, args[0])
			if err != nil {
				return err
			}
			defer r.Close()
			meter := startProgress(x.errOut, size, !x.json && isTerminal(x.errOut), 500*time.Millisecond, 200*time.Millisecond)
			t, err := x.c.ImportTemplate(ctx, name, r, size, meter.set, nil)
			meter.finish()
			if err != nil {
				return err
			}
			return x.reportTemplate(t)
		}),
	}
	cmd.Flags().StringVarP(&name, "tag", "t", "", "template NAME[:TAG] (required)")
	return cmd
}

// openImport opens what import sends: a file as it is (its size known),
// a directory as a tar stream written while it is sent (an OCI layout
// becomes an OCI archive, a root filesystem a root filesystem tarball).
func openImport(ctx context.Context, path string) (io.ReadCloser, int64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, 0, err
	}
	if !fi.IsDir() {
		f, err := os.Open(path)
		if err != nil {
			return nil, 0, err
		}
		return f, fi.Size(), nil
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(tarDir(ctx, path, pw)) }()
	return pr, -1, nil
}

// tarDir writes the tree at root as a tar stream: directories, regular
// files, symbolic links (as they are, never followed), hard links within
// the tree, with modes and numeric owners. Sockets and devices are
// skipped (a template's devices come from the runtime).
func tarDir(ctx context.Context, root string, w io.Writer) error {
	tw := tar.NewWriter(w)
	links := map[[2]uint64]string{} // (dev, inode) of files with several links
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		rel, err := filepath.Rel(root, path)
		if err != nil || rel == "." {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		target := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if target, err = os.Readlink(path); err != nil {
				return err
			}
		}
		if !fi.Mode().IsRegular() && !fi.IsDir() && fi.Mode()&fs.ModeSymlink == 0 {
			return nil
		}
		hdr, err := tar.FileInfoHeader(fi, target)
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if fi.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uname, hdr.Gname = "", ""
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && fi.Mode().IsRegular() && st.Nlink > 1 {
			key := [2]uint64{uint64(st.Dev), st.Ino}
			if first, ok := links[key]; ok {
				hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
			} else {
				links[key] = hdr.Name
			}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if hdr.Typeflag != tar.TypeReg {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.CopyN(tw, f, hdr.Size)
		return err
	})
	if err != nil {
		return fmt.Errorf("tar %s: %w", root, err)
	}
	return tw.Close()
}

func newTemplateExportCmd() *cobra.Command {
	var out, format string
	cmd := &cobra.Command{
		Use:               "export NAME -o FILE [--format docker|oci]",
		Short:             "Write a template as a docker-loadable tarball or an OCI archive (server operator only)",
		Example:           "  agentbox template export py312 -o py312.tar && docker load -i py312.tar",
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE: clientRunE(cobra.ExactArgs(1), func(ctx context.Context, x *cli, args []string) error {
			if out == "" {
				return usageErrorf("-o FILE is required (\"-\" for stdout)")
			}
			if format != "docker" && format != "oci" {
				return usageErrorf("--format: want docker or oci, got %q", format)
			}
			return exportTemplate(ctx, x, args[0], format, out)
		}),
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "file to write (\"-\": stdout)")
	cmd.Flags().StringVar(&format, "format", "docker", "docker (for docker load) or oci (an OCI layout archive)")
	return cmd
}

// exportTemplate streams the export to out through a temporary file next
// to it, renamed into place only once complete: a failed export never
// leaves a truncated tarball under the asked name.
func exportTemplate(ctx context.Context, x *cli, name, format, out string) error {
	rc, err := x.c.ExportTemplate(ctx, name, format)
	if err != nil {
		return err
	}
	defer rc.Close()
	meter := startProgress(x.errOut, -1, !x.json && out != "-" && isTerminal(x.errOut), 500*time.Millisecond, 200*time.Millisecond)
	defer meter.finish()
	src := &countingReader{r: rc, progress: meter.set}
	if out == "-" {
		_, err := io.Copy(x.out, src)
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".part-*")
	if err != nil {
		return err
	}
	_, err = io.Copy(tmp, src)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), out)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("export %s to %s: %w", name, out, err)
	}
	return nil
}

// countingReader reports the running total of bytes read.
type countingReader struct {
	r        io.Reader
	n        int64
	progress func(int64)
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	c.progress(c.n)
	return n, err
}

func newTemplateRmCmd() *cobra.Command {
	return &cobra.Command{
		Use:               "rm NAME...",
		Aliases:           []string{"remove", "delete"},
		Short:             "Delete templates (server operator only; refused while a sandbox uses one)",
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE: clientRunE(cobra.MinimumNArgs(1), func(ctx context.Context, x *cli, args []string) error {
			for _, name := range args {
				if err := x.c.DeleteTemplate(ctx, name); err != nil {
					return err
				}
				if !x.json {
					fmt.Fprintf(x.out, "deleted %s\n", name)
				}
			}
			return nil
		}),
	}
}
