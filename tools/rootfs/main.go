// Command rootfs bootstraps a Debian root filesystem tarball from the
// host's apt sources (internal/template/bootstrap, what `agentbox template
// bootstrap` runs in the daemon), with no daemon and no registry, and
// prints its path. scripts/image.sh builds the daemon's container image on
// it (`make image`).
//
//	go run ./tools/rootfs -cache DIR [-image debian:bookworm] [-include pkg,pkg]
//
// It needs root and mmdebstrap, as the daemon's bootstrap does. Tarballs are
// cached in DIR by suite, packages and apt sources: a second run is instant.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/agentbox/agentbox/internal/template/bootstrap"
)

func main() {
	image := flag.String("image", "debian:bookworm", "the Debian image to make (debian:SUITE)")
	include := flag.String("include", "", "Debian packages to install, comma-separated")
	cache := flag.String("cache", "", "directory of cached tarballs (required; outside any checkout)")
	keep := flag.Int("keep", bootstrap.DefaultKeep, "tarballs the cache keeps")
	flag.Parse()
	if *cache == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: rootfs -cache DIR [-image debian:SUITE] [-include pkg,...]")
		os.Exit(2)
	}
	var pkgs []string
	for _, p := range strings.Split(*include, ",") {
		if p = strings.TrimSpace(p); p != "" {
			pkgs = append(pkgs, p)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	path, err := bootstrap.Bootstrap(ctx, bootstrap.Options{Image: *image, Include: pkgs, CacheDir: *cache, Keep: *keep}, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rootfs:", err)
		os.Exit(1)
	}
	fmt.Println(path)
}
