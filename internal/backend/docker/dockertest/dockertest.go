// Package dockertest makes the Docker images the Docker backend's tests,
// end-to-end tests and benchmarks run, locally (no registry is reachable in
// CI): a one-layer image of a few host programs and the shared libraries
// they load, imported through the Engine API. The image is named after a
// hash of its content, so it is built once per engine and content.
package dockertest

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
)

// Available reports whether a Docker engine answers (DOCKER_HOST or the
// default socket).
func Available(ctx context.Context) (*client.Client, error) {
	api, err := client.New(client.FromEnv)
	if err != nil {
		return nil, err
	}
	if _, err := api.Ping(ctx, client.PingOptions{}); err != nil {
		api.Close()
		return nil, err
	}
	return api, nil
}

// Options choose what goes into the image.
type Options struct {
	// Programs are host executables (looked up in PATH) copied with their
	// libraries. Default: a shell and the coreutils the tests use.
	Programs []string
	// Python adds the host's python3 with its standard library (for code
	// contexts), when the host has one.
	Python bool
}

var defaultPrograms = []string{"sh", "dash", "bash", "cat", "id", "hostname", "ls", "sleep", "echo", "pwd",
	"mkdir", "rm", "head", "tr", "wc", "grep", "sed", "touch", "stat", "env", "kill", "true", "false", "dd", "seq", "nproc", "mount"}

// RootfsTar returns the root filesystem tarball of a test image with
// opts' content (what EnsureImage imports; the template store imports it
// too).
func RootfsTar(opts Options) (*bytes.Buffer, error) {
	progs := opts.Programs
	if len(progs) == 0 {
		progs = defaultPrograms
	}
	files := map[string]bool{}
	var dirs []string
	for _, p := range progs {
		path, err := exec.LookPath(p)
		if err != nil {
			continue
		}
		addWithLibs(path, files)
	}
	if opts.Python {
		// The system's python (a version manager's shim in PATH is a script).
		if path, err := exec.LookPath("/usr/bin/python3"); err == nil {
			addWithLibs(path, files)
			real, _ := filepath.EvalSymlinks(path)
			stdlib := filepath.Join("/usr/lib", filepath.Base(real))
			if st, err := os.Stat(stdlib); err == nil && st.IsDir() {
				dirs = append(dirs, stdlib)
				// The libraries its extension modules load (libffi, ...).
				exts, _ := filepath.Glob(filepath.Join(stdlib, "lib-dynload", "*.so"))
				for _, e := range exts {
					addWithLibs(e, files)
				}
			}
		}
	}
	var buf bytes.Buffer
	if err := writeTar(&buf, files, dirs); err != nil {
		return nil, err
	}
	return &buf, nil
}

// EnsureImage returns the name of a test image with opts' content,
// importing it into the engine unless it is there already.
func EnsureImage(ctx context.Context, api *client.Client, opts Options) (string, error) {
	buf, err := RootfsTar(opts)
	if err != nil {
		return "", err
	}
	changes := []string{"ENV PATH=/usr/local/bin:/usr/bin:/bin", "LABEL io.agentbox.test=1"}
	h := sha256.New()
	h.Write(buf.Bytes())
	h.Write([]byte(strings.Join(changes, "\n")))
	sum := h.Sum(nil)
	name := "agentbox-test:" + hex.EncodeToString(sum[:8])
	if _, err := api.ImageInspect(ctx, name); err == nil {
		return name, nil
	} else if !cerrdefs.IsNotFound(err) {
		return "", fmt.Errorf("inspect %s: %w", name, err)
	}
	rc, err := api.ImageImport(ctx, client.ImageImportSource{Source: buf, SourceName: "-"}, name,
		client.ImageImportOptions{Changes: changes})
	if err != nil {
		return "", fmt.Errorf("import %s: %w", name, err)
	}
	out, _ := io.ReadAll(rc)
	rc.Close()
	if _, err := api.ImageInspect(ctx, name); err != nil {
		return "", fmt.Errorf("import %s: %w (%s)", name, err, out)
	}
	return name, nil
}

// addWithLibs adds a host executable and the libraries ldd lists for it.
func addWithLibs(path string, files map[string]bool) {
	files[path] = true
	out, _ := exec.Command("ldd", path).Output()
	for _, line := range strings.Split(string(out), "\n") {
		for _, f := range strings.Fields(line) {
			if strings.HasPrefix(f, "/") {
				files[f] = true
			}
		}
	}
}

// usrPath maps a host path to its place in a /usr-merged image.
func usrPath(p string) string {
	return "usr/" + strings.TrimPrefix(strings.TrimPrefix(p, "/usr"), "/")
}

// writeTar writes a /usr-merged root filesystem: files at their resolved
// paths (and their unresolved ones), dirs copied whole, the top-level
// symlinks (bin, lib, lib64, sbin) and the mount points a container needs.
func writeTar(w io.Writer, files map[string]bool, dirs []string) error {
	tw := tar.NewWriter(w)
	written := map[string]bool{}
	mkdir := func(name string, mode int64) error {
		name = strings.TrimSuffix(name, "/")
		if name == "" || name == "." || written[name] {
			return nil
		}
		written[name] = true
		return tw.WriteHeader(&tar.Header{Name: name + "/", Mode: mode, Typeflag: tar.TypeDir})
	}
	mkdirAll := func(name string) error {
		parts := strings.Split(name, "/")
		for i := 1; i <= len(parts); i++ {
			if err := mkdir(strings.Join(parts[:i], "/"), 0o755); err != nil {
				return err
			}
		}
		return nil
	}
	if err := mkdir("tmp", 0o1777); err != nil {
		return err
	}
	for _, d := range []string{"etc", "run", "home", "root", "proc", "sys", "dev", "workspace", "usr/bin", "usr/lib", "usr/lib64", "usr/sbin", "opt"} {
		if err := mkdirAll(d); err != nil {
			return err
		}
	}
	for _, l := range []string{"bin", "lib", "lib64", "sbin"} {
		if err := tw.WriteHeader(&tar.Header{Name: l, Linkname: "usr/" + l, Typeflag: tar.TypeSymlink, Mode: 0o777}); err != nil {
			return err
		}
	}
	// In a fixed order: the image is named after the tarball's hash.
	etc := [][2]string{
		{"etc/group", "root:x:0:\nuser:x:1000:\n"},
		{"etc/passwd", "root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/sh\n"},
	}
	for _, e := range etc {
		name, body := e[0], e[1]
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			return err
		}
	}
	addFile := func(src, dst string) error {
		if written[dst] {
			return nil
		}
		data, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		st, err := os.Stat(src)
		if err != nil {
			return err
		}
		if err := mkdirAll(filepath.Dir(dst)); err != nil {
			return err
		}
		written[dst] = true
		if err := tw.WriteHeader(&tar.Header{Name: dst, Mode: int64(st.Mode().Perm()), Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	}
	names := make([]string, 0, len(files))
	for f := range files {
		names = append(names, f)
	}
	sort.Strings(names)
	for _, f := range names {
		real, err := filepath.EvalSymlinks(f)
		if err != nil {
			return err
		}
		for _, dst := range []string{real, f} {
			if err := addFile(real, usrPath(dst)); err != nil {
				return err
			}
		}
	}
	for _, d := range dirs {
		err := filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			switch {
			case e.IsDir():
				if e.Name() == "__pycache__" || e.Name() == "test" || e.Name() == "site-packages" || e.Name() == "dist-packages" {
					return filepath.SkipDir
				}
				return mkdirAll(usrPath(p))
			case e.Type().IsRegular():
				return addFile(p, usrPath(p))
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return tw.Close()
}
