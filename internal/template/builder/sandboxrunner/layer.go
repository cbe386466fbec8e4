package sandboxrunner

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/agentbox/agentbox/internal/manager"
)

// dirState is what a directory of the upper layer was before the step.
type dirState struct {
	mode     int64
	uid, gid int
}

// preState lists the directories in the sandbox's upper layer before the
// step runs: those the mount points' set-up made (or copied up). A step
// that leaves one of them as it was did not change it.
func preState(ctx context.Context, sb manager.BuildSandbox) (map[string]dirState, error) {
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := sb.Snapshotter.SnapshotDiff(ctx, sb.Info.ID, pw)
		pw.CloseWithError(err)
		done <- err
	}()
	dirs := map[string]dirState{}
	tr := tar.NewReader(pr)
	var rerr error
	for {
		h, err := tr.Next()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				rerr = err
			}
			break
		}
		if h.Typeflag == tar.TypeDir {
			dirs[clean(h.Name)] = dirState{mode: h.Mode, uid: h.Uid, gid: h.Gid}
		}
	}
	pr.CloseWithError(io.ErrClosedPipe)
	if err := <-done; err != nil && !errors.Is(err, io.ErrClosedPipe) {
		return nil, fmt.Errorf("read the build sandbox's layer before the step: %w", err)
	}
	if rerr != nil {
		return nil, fmt.Errorf("read the build sandbox's layer before the step: %w", rerr)
	}
	return dirs, nil
}

// writeLayer writes the step's layer to f: the sandbox's snapshot diff
// without the mount targets (and what is below them), and without the
// directories made only to hold a mount point, when the step left them
// unchanged and put nothing else in them.
func writeLayer(ctx context.Context, sb manager.BuildSandbox, f *os.File, targets []string, pre map[string]dirState) error {
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := sb.Snapshotter.SnapshotDiff(ctx, sb.Info.ID, pw)
		pw.CloseWithError(err)
		done <- err
	}()
	ferr := filterLayer(pr, f, targets, pre)
	pr.CloseWithError(io.ErrClosedPipe)
	derr := <-done
	if derr != nil && !errors.Is(derr, io.ErrClosedPipe) {
		return fmt.Errorf("snapshot the step: %w", derr)
	}
	if ferr != nil {
		return fmt.Errorf("write the step's layer: %w", ferr)
	}
	return nil
}

// filterLayer copies the layer tar r to w, leaving out the mount targets
// (rooted paths) and the unchanged stub directories above them.
func filterLayer(r io.Reader, w io.Writer, targets []string, pre map[string]dirState) error {
	rel := make([]string, len(targets))
	for i, t := range targets {
		rel[i] = clean(t)
	}
	tr, tw := tar.NewReader(r), tar.NewWriter(w)
	var held []*tar.Header // stub candidates, outermost first
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		name := clean(h.Name)
		// Entries come parents first, depth first: a held directory
		// whose subtree this entry is not in had no other content.
		n := 0
		for _, d := range held {
			if under(name, clean(d.Name)) {
				held[n] = d
				n++
			}
		}
		held = held[:n]
		if inTargets(name, rel) || inTargets(unwhiteout(name), rel) {
			continue
		}
		if h.Typeflag == tar.TypeLink && inTargets(clean(h.Linkname), rel) {
			return fmt.Errorf("%s is a hard link into the mount at %s", h.Name, h.Linkname)
		}
		if h.Typeflag == tar.TypeDir && aboveTarget(name, rel) {
			if s, ok := pre[name]; ok && s == (dirState{mode: h.Mode, uid: h.Uid, gid: h.Gid}) {
				held = append(held, h)
				continue
			}
		}
		for _, d := range held {
			if err := tw.WriteHeader(d); err != nil {
				return err
			}
		}
		held = held[:0]
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
	return tw.Close()
}

// clean turns a tar name into "a/b" (no leading ./ or /, no trailing /).
func clean(name string) string {
	name = strings.TrimPrefix(name, "./")
	return strings.Trim(name, "/")
}

// under reports whether name is dir or below it.
func under(name, dir string) bool {
	return dir == "" || name == dir || strings.HasPrefix(name, dir+"/")
}

func inTargets(name string, targets []string) bool {
	for _, t := range targets {
		if under(name, t) {
			return true
		}
	}
	return false
}

// aboveTarget reports whether name is a strict ancestor of a target.
func aboveTarget(name string, targets []string) bool {
	for _, t := range targets {
		if name != t && under(t, name) {
			return true
		}
	}
	return false
}

// unwhiteout is the path a whiteout entry ("a/.wh.b") deletes.
func unwhiteout(name string) string {
	i := strings.LastIndexByte(name, '/')
	base := name[i+1:]
	if !strings.HasPrefix(base, ".wh.") || base == ".wh..wh..opq" {
		return name
	}
	return name[:i+1] + strings.TrimPrefix(base, ".wh.")
}
