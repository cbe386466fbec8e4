// Command goproxy writes a Go module proxy tree (GOPROXY=file://DIR) that
// serves this module, github.com/agentbox/agentbox, at one version made
// from a git revision of the checkout: what `make release` ships so that
// `go get github.com/agentbox/agentbox/client@VERSION` works before (or
// without) the module being served at its path (docs/quickstart.md).
//
//	go run ./tools/goproxy -out DIR [-rev HEAD] [-version vX.Y.Z]
//
// The version defaults to the revision's tag when it has a semver one,
// else to its pseudo-version (v0.0.0-<commit time>-<12 hex of the
// commit>). The zip holds the committed files only (golang.org/x/mod/zip
// from git: no build output, no node_modules, no nested modules). It
// prints the version.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	modzip "golang.org/x/mod/zip"
)

const modulePath = "github.com/agentbox/agentbox"

func main() {
	out := flag.String("out", "", "the proxy tree to write into (required)")
	rev := flag.String("rev", "HEAD", "the git revision")
	version := flag.String("version", "", "the module version (default: the revision's semver tag, else its pseudo-version)")
	flag.Parse()
	if *out == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: goproxy -out DIR [-rev HEAD] [-version vX.Y.Z]")
		os.Exit(2)
	}
	v, err := write(*out, *rev, *version)
	if err != nil {
		fmt.Fprintln(os.Stderr, "goproxy:", err)
		os.Exit(1)
	}
	fmt.Println(v)
}

func git(args ...string) (string, error) {
	var stderr bytes.Buffer
	cmd := exec.Command("git", args...)
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(b)), nil
}

func write(out, rev, version string) (string, error) {
	root, err := git("rev-parse", "--show-toplevel")
	if err != nil {
		return "", err
	}
	commit, err := git("rev-parse", rev+"^{commit}")
	if err != nil {
		return "", err
	}
	unix, err := git("log", "-1", "--format=%ct", commit)
	if err != nil {
		return "", err
	}
	var secs int64
	if _, err := fmt.Sscan(unix, &secs); err != nil {
		return "", fmt.Errorf("commit time %q: %w", unix, err)
	}
	when := time.Unix(secs, 0).UTC()
	if version == "" {
		if tag, err := git("describe", "--tags", "--exact-match", commit); err == nil && semver.IsValid(tag) && semver.Build(tag) == "" {
			version = tag
		} else {
			version = module.PseudoVersion("", "", when, commit[:12])
		}
	}
	if !semver.IsValid(version) || semver.Major(version) != "v0" && semver.Major(version) != "v1" {
		return "", fmt.Errorf("version %q: want a v0 or v1 semantic version (the module path has no /vN)", version)
	}
	m := module.Version{Path: modulePath, Version: version}
	dir := filepath.Join(out, modulePath, "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	zipPath := filepath.Join(dir, version+".zip")
	f, err := os.Create(zipPath + ".tmp")
	if err != nil {
		return "", err
	}
	defer os.Remove(zipPath + ".tmp")
	// The committed tree (git archive), zipped as the go command zips a
	// module directory (modzip.CreateFromVCS wants the repository's own
	// .git directory, which a worktree has not).
	tree, err := os.MkdirTemp("", "agentbox-goproxy-")
	if err != nil {
		f.Close()
		return "", err
	}
	defer os.RemoveAll(tree)
	archive := exec.Command("sh", "-c", `git -C "$1" archive --format=tar "$2" | tar -x -C "$3"`, "sh", root, commit, tree)
	if b, err := archive.CombinedOutput(); err != nil {
		f.Close()
		return "", fmt.Errorf("git archive %s: %w: %s", commit, err, b)
	}
	if err := modzip.CreateFromDir(f, m, tree); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	if err := os.Rename(zipPath+".tmp", zipPath); err != nil {
		return "", err
	}
	gomod, err := git("show", commit+":go.mod")
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, version+".mod"), []byte(gomod+"\n"), 0o644); err != nil {
		return "", err
	}
	info, _ := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, when})
	if err := os.WriteFile(filepath.Join(dir, version+".info"), info, 0o644); err != nil {
		return "", err
	}
	// list: every version the tree serves, this one added.
	list := filepath.Join(dir, "list")
	old, _ := os.ReadFile(list)
	seen := map[string]bool{}
	var versions []string
	for _, l := range append(strings.Fields(string(old)), version) {
		if !seen[l] {
			seen[l] = true
			versions = append(versions, l)
		}
	}
	semver.Sort(versions)
	if err := os.WriteFile(list, []byte(strings.Join(versions, "\n")+"\n"), 0o644); err != nil {
		return "", err
	}
	return version, nil
}
