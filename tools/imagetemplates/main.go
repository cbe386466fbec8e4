// Command imagetemplates makes the template store the daemon's container
// image ships (scripts/image.sh, `make image`): the built-in templates a
// newcomer's first calls need, so that a container on a fresh volume
// serves them at once instead of building them for minutes.
//
//	go run ./tools/imagetemplates -store DIR -bin bin/agentbox [-o FILE] NAME...
//
// The templates come from the template store DIR (a TEMPLATE_DIR; kept
// between runs, like a daemon's). Those it lacks are built there first,
// as a daemon's first start builds them (TEMPLATE_AUTO_BUILD: debian:bookworm
// bootstrapped from the host's apt, then templates/), by a daemon of BIN
// started for that on loopback with a data dir of its own and stopped
// after. Then, with -o, FILE is written: a gzipped tar of a store holding
// those templates alone (template.Store.Seed; GNU tar keeps ownership,
// overlayfs whiteouts and xattrs), which the image's entrypoint unpacks
// into an empty data dir. Without -o it prints each template's digest
// (what the image's content is, for a cache of images).
//
// It needs root (the daemon, the store's layers' owners), GNU tar and, to
// build, mmdebstrap; no registry is involved.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/template"
)

func main() {
	store := flag.String("store", "", "the template store (a TEMPLATE_DIR) to take the templates from, and build them into (required)")
	bin := flag.String("bin", "bin/agentbox", "the daemon that builds templates the store lacks")
	out := flag.String("o", "", "write the seed store here (a .tar.gz); without it, print each template's digest")
	wait := flag.Duration("timeout", 45*time.Minute, "how long the builds may take")
	flag.Parse()
	if *store == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: imagetemplates -store DIR [-bin bin/agentbox] [-o FILE.tar.gz] NAME...")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *store, *bin, *out, *wait, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "imagetemplates:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, store, bin, out string, wait time.Duration, names []string) error {
	store, err := filepath.Abs(store)
	if err != nil {
		return err
	}
	// Sandboxes' unprivileged ids pass through to the layers (as through
	// a data dir: agentbox doctor's data-dir check).
	if err := os.MkdirAll(store, 0o711); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	missing, err := absent(ctx, store, names, log)
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		fmt.Fprintf(os.Stderr, "imagetemplates: building %s into %s (minutes the first time)\n", strings.Join(missing, ", "), store)
		if err := build(ctx, store, bin, names, wait); err != nil {
			return err
		}
	}
	st, err := template.Open(ctx, store, template.Options{Logger: log})
	if err != nil {
		return err
	}
	defer st.Close()
	if out == "" {
		for _, n := range names {
			info, err := st.Get(ctx, n)
			if err != nil {
				return err
			}
			fmt.Printf("%s %s\n", n, info.Digest)
		}
		return nil
	}
	return writeSeed(ctx, st, store, out, names)
}

// absent lists the names the store lacks.
func absent(ctx context.Context, store string, names []string, log *slog.Logger) ([]string, error) {
	st, err := template.Open(ctx, store, template.Options{Logger: log})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	var missing []string
	for _, n := range names {
		if _, err := st.Get(ctx, n); err != nil {
			missing = append(missing, n)
		}
	}
	return missing, nil
}

// build runs a daemon on store whose start builds names (the built-in
// templates' background build) and stops it once each is ready.
func build(ctx context.Context, store, bin string, names []string, wait time.Duration) error {
	data, err := os.MkdirTemp("", "agentbox-imagetemplates-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(data)
	if err := os.Chmod(data, 0o711); err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, "serve")
	// Later entries win: the caller's settings stay but for these.
	cmd.Env = append(os.Environ(), "AGENTBOX_DATA_DIR="+data, "TEMPLATE_DIR="+store,
		"HOST=127.0.0.1", "PORT="+strconv.Itoa(port), "TEMPLATE_AUTO_BUILD="+strings.Join(names, ","),
		"API_KEYS=", "BEARER_TOKEN=", "AUTO_CLEANUP=true", "POOL_SIZE=0")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", bin, err)
	}
	// exited closes once the daemon has ended; waitErr is then its end.
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	defer func() {
		select {
		case <-exited:
			return
		default:
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(2 * time.Minute):
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	c, err := client.New("http://127.0.0.1:" + strconv.Itoa(port))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	var last error
	for {
		select {
		case <-exited:
			return fmt.Errorf("the daemon building the templates exited: %v", waitErr)
		case <-ctx.Done():
			return fmt.Errorf("templates %s not built: %w (last answer: %v)", strings.Join(names, ", "), ctx.Err(), last)
		case <-tick.C:
		}
		// Until it listens (or while it is busy) the list fails: the
		// daemon's exit or the timeout ends the wait.
		l, err := c.ListTemplates(ctx)
		if err != nil {
			last = err
			continue
		}
		ready := 0
		for _, n := range names {
			for _, b := range l.Builtin {
				if b.Name != n {
					continue
				}
				switch b.State {
				case "ready":
					ready++
				case "failed", "not_built":
					return fmt.Errorf("template %s %s: %s (by hand: %s)", n, b.State, b.Error, b.Command)
				}
			}
		}
		if ready == len(names) {
			return nil
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// writeSeed writes out: templates.json of the seed, then the store's
// entries it names, gzipped, through a temporary file renamed into place.
func writeSeed(ctx context.Context, st *template.Store, store, out string, names []string) error {
	records, paths, err := st.Seed(ctx, names...)
	if err != nil {
		return err
	}
	stage, err := os.MkdirTemp("", "agentbox-seed-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(stage)
	if err := os.WriteFile(filepath.Join(stage, "templates.json"), records, 0o600); err != nil {
		return err
	}
	tmp := out + ".tmp"
	defer os.Remove(tmp)
	args := []string{"--xattrs", "--xattrs-include=*", "--numeric-owner", "--sort=name", "-czf", tmp,
		"-C", stage, "templates.json", "-C", store}
	args = append(args, paths...)
	cmd := exec.CommandContext(ctx, "tar", args...)
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("tar the seed store: %w", err)
	}
	if err := os.Rename(tmp, out); err != nil {
		return err
	}
	fi, err := os.Stat(out)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "imagetemplates: %s: %s (%d layers), %d MiB\n", out, strings.Join(names, ", "), countLayers(paths), fi.Size()>>20)
	return nil
}

func countLayers(paths []string) int {
	n := 0
	for _, p := range paths {
		if strings.HasPrefix(p, "layers/") {
			n++
		}
	}
	return n
}
