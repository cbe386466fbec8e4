package agentscope

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/dataplane"
)

// The git watcher: /workspace is a git repository from creation, and the
// sandbox API commits, diffs and lists its history. git runs inside the
// sandbox through the agent; caller values reach it as positional shell
// parameters, never spliced into the script.

const gitTimeout = 2 * time.Minute

// gitInitScript makes /workspace a repository with a local identity and a
// first (empty) commit, so there is always a HEAD to diff against. It is
// idempotent: a restored workspace keeps its history. A template without
// git (an image that does not ship it) gets no repository rather than no
// sandbox; the watcher routes then say git is missing.
const gitInitScript = `set -e
command -v git >/dev/null || exit 0
git -c init.defaultBranch=main init -q
git config --local user.name >/dev/null || git config --local user.name agentbox
git config --local user.email >/dev/null || git config --local user.email agentbox@localhost
git rev-parse -q --verify HEAD >/dev/null || git commit -q --allow-empty -m "Initial commit"`

// git runs script with sh in /workspace; args are $1, $2, ...
func (s *Server) git(ctx context.Context, r *record, script string, args ...string) (string, error) {
	cmd := append([]string{"/bin/sh", "-c", script, "sh"}, args...)
	dr, done, err := s.work(ctx, r)
	if err != nil {
		return "", err
	}
	defer done()
	res, err := dr.ExecBuffered(ctx, dataplane.ExecRequest{
		Cmd: cmd, Cwd: workspaceRoot, Timeout: gitTimeout,
		Env: map[string]string{"GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_NOSYSTEM": "1", "LC_ALL": "C"},
	})
	if err != nil {
		return "", err
	}
	if res.ExitCode == 127 {
		return "", fmt.Errorf("git: not installed in this sandbox's template: %s", strings.TrimSpace(string(res.Stderr)))
	}
	if res.ExitCode != 0 {
		return "", fmt.Errorf("git: %s: %s", res.Status, strings.TrimSpace(string(res.Stderr)))
	}
	return string(res.Stdout), nil
}

// gitCommit stages everything and commits it. commit is "" when there was
// nothing to commit.
func (s *Server) gitCommit(ctx context.Context, r *record, message string) (string, error) {
	out, err := s.git(ctx, r, `git add -A && if git diff --cached --quiet; then exit 0; fi
git commit -q -m "$1" && git rev-parse HEAD`, message)
	return strings.TrimSpace(out), err
}

// gitDiff returns per-file unified diffs: between commits a and b, or
// between a (default HEAD) and the working tree, untracked files included
// (staged in a throw-away index, so the real index is untouched).
func (s *Server) gitDiff(ctx context.Context, r *record, a, b string) (map[string]string, error) {
	for _, c := range []string{a, b} {
		if !validRev(c) {
			return nil, fmt.Errorf("invalid commit %q", c)
		}
	}
	if a == "" {
		a = "HEAD"
	}
	var out string
	var err error
	if b != "" {
		out, err = s.git(ctx, r, `git -c core.quotePath=false diff --no-color --no-renames --no-ext-diff "$1" "$2" --`, a, b)
	} else {
		out, err = s.git(ctx, r, `idx=$(mktemp) && trap 'rm -f "$idx"' EXIT && export GIT_INDEX_FILE="$idx" &&
git read-tree HEAD && git add -A &&
git -c core.quotePath=false diff --cached --no-color --no-renames --no-ext-diff "$1" --`, a)
	}
	if err != nil {
		return nil, err
	}
	return splitPatch(out), nil
}

// validRev accepts commit names made of the characters revisions use, and
// never an option.
func validRev(s string) bool {
	if s == "" {
		return true
	}
	if len(s) > 200 || strings.HasPrefix(s, "-") {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("_./~^@{}-", c)) {
			return false
		}
	}
	return true
}

// splitPatch splits a git patch into {path: that file's diff}.
func splitPatch(patch string) map[string]string {
	out := map[string]string{}
	var name string
	var cur strings.Builder
	flush := func() {
		if name != "" {
			out[name] = cur.String()
		}
		cur.Reset()
	}
	for _, line := range strings.SplitAfter(patch, "\n") {
		if strings.HasPrefix(line, "diff --git ") {
			flush()
			name = patchPath(strings.TrimSuffix(line, "\n"))
		}
		if name != "" {
			cur.WriteString(line)
		}
	}
	flush()
	return out
}

// patchPath extracts X from "diff --git a/X b/X" (renames are off, so both
// sides name the same path).
func patchPath(line string) string {
	rest := strings.TrimPrefix(line, "diff --git ")
	if strings.HasPrefix(rest, `"`) {
		if i := strings.Index(rest[1:], `" `); i >= 0 {
			return strings.TrimPrefix(rest[1:i+1], "a/")
		}
	}
	if n := len(rest); n >= 6 && (n-5)%2 == 0 {
		return rest[2 : 2+(n-5)/2]
	}
	return strings.TrimPrefix(rest, "a/")
}

// gitLogEntry is one commit of git_logs.
type gitLogEntry struct {
	Commit  string            `json:"commit"`
	Author  string            `json:"author"`
	Date    string            `json:"date"`
	Message string            `json:"message"`
	Diff    map[string]string `json:"diff"`
}

// gitLog lists the latest commits, newest first, each with its diff.
func (s *Server) gitLog(ctx context.Context, r *record) ([]gitLogEntry, error) {
	out, err := s.git(ctx, r, `git -c core.quotePath=false log -n 100 --no-color --no-renames --no-ext-diff -p --format='%x01%H%x00%an <%ae>%x00%aI%x00%B%x02'`)
	if err != nil {
		return nil, err
	}
	logs := []gitLogEntry{}
	for _, chunk := range strings.Split(out, "\x01") {
		head, patch, ok := strings.Cut(chunk, "\x02")
		if !ok {
			continue
		}
		f := strings.SplitN(head, "\x00", 4)
		if len(f) != 4 {
			continue
		}
		logs = append(logs, gitLogEntry{Commit: f[0], Author: f[1], Date: f[2],
			Message: strings.TrimSpace(f[3]), Diff: splitPatch(strings.TrimLeft(patch, "\n"))})
	}
	return logs, nil
}
