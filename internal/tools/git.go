package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"
)

// gitIdentity gives commits an author when the sandbox has none set.
const gitIdentity = `if ! git config user.email >/dev/null 2>&1; then
export GIT_AUTHOR_NAME="${GIT_AUTHOR_NAME:-agentbox agent}" GIT_AUTHOR_EMAIL="${GIT_AUTHOR_EMAIL:-agent@agentbox.invalid}"
export GIT_COMMITTER_NAME="${GIT_COMMITTER_NAME:-agentbox agent}" GIT_COMMITTER_EMAIL="${GIT_COMMITTER_EMAIL:-agent@agentbox.invalid}"; fi; `

var repoProp = str("The repository directory (default /workspace).")

func gitTools() []*Tool {
	return []*Tool{
		{
			Name:        "git_init",
			Description: "Create an empty git repository (default in /workspace).",
			Schema:      object(nil, p("path", repoProp), p("branch", str("Name of the initial branch (default main)."))),
			run:         runGitInit,
		},
		{
			Name: "git_clone",
			Description: "Clone a git repository into the workspace. The clone runs inside the sandbox, so the sandbox's network policy must allow the host. " +
				"Credentials are not added: use public URLs, or set them up in the sandbox yourself.",
			Schema: object(req("url"),
				p("url", str("Repository URL (https://, git://, ssh:// or a local path).")),
				p("path", str("Target directory (default: /workspace/<repository name>).")),
				p("branch", str("Branch or tag to check out.")),
				p("depth", integer("Shallow clone with this many commits.", 1, 1000000)),
			),
			run: runGitClone,
		},
		{
			Name:        "git_status",
			Description: "Show the branch and the changed, staged and untracked files of a repository (git status --short --branch).",
			Schema:      object(nil, p("path", repoProp)),
			run:         runGitStatus,
		},
		{
			Name:        "git_diff",
			Description: "Show changes as a unified diff: unstaged changes by default, staged ones with staged=true, or against a revision with ref.",
			Schema: object(nil,
				p("path", repoProp),
				p("staged", boolean("Show what is staged for the next commit.")),
				p("ref", str("Compare the working tree with this revision (e.g. HEAD~1, main).")),
				p("file", str("Limit the diff to this file or directory (relative to the repository).")),
			),
			run: runGitDiff,
		},
		{
			Name:        "git_commit",
			Description: "Commit changes: stages every change (git add -A) unless files lists what to stage, then commits with message. Returns the new commit.",
			Schema: object(req("message"),
				p("path", repoProp),
				p("message", map[string]any{"type": "string", "minLength": 1, "description": "The commit message."}),
				p("files", strArray("Files to stage and commit (default: all changes).", 1000)),
				p("author", str("Author as \"Name <email>\" (default: the repository's configured user, else an agentbox identity).")),
			),
			run: runGitCommit,
		},
		{
			Name:        "git_push",
			Description: "Push commits to a remote (default origin, current branch). Runs inside the sandbox under its network policy; credentials must already be configured there.",
			Schema: object(nil,
				p("path", repoProp),
				p("remote", str("Remote name or URL (default origin).")),
				p("branch", str("Branch to push (default: the current branch).")),
				p("set_upstream", boolean("Set the upstream of the branch (-u).")),
			),
			run: runGitPush,
		},
		{
			Name:        "git_log",
			Description: "Show recent commits: hash, date, author and subject, newest first.",
			Schema: object(nil,
				p("path", repoProp),
				p("max_count", integer("Number of commits (default 20).", 1, 500)),
				p("file", str("Only commits touching this file or directory.")),
			),
			run: runGitLog,
		},
	}
}

// git runs a git script in the repository dir and returns its output, or
// a tool error with git's message.
func (s *Session) git(ctx context.Context, sb, repo, script string, timeout time.Duration, args ...string) (string, error) {
	dir := workspace
	if repo != "" {
		var err error
		if dir, err = s.resolve(ctx, sb, repo, false); err != nil {
			return "", err
		}
	}
	res, err := s.sh(ctx, sb, dir, timeout, `command -v git >/dev/null 2>&1 || { echo "git is not installed in this sandbox" >&2; exit 127; }; export GIT_TERMINAL_PROMPT=0; `+script, args...)
	if err != nil {
		return "", err
	}
	out := combined(res.Stdout, res.Stderr)
	if res.ExitCode != 0 {
		return "", &gitError{code: res.ExitCode, err: fail("git failed (exit code %d):\n%s", res.ExitCode, strings.TrimSpace(out))}
	}
	return out, nil
}

// gitError is a git script's failure: its exit code, and the tool error
// telling git's output.
type gitError struct {
	code int
	err  error
}

func (e *gitError) Error() string { return e.err.Error() }
func (e *gitError) Unwrap() error { return e.err }

// exitNoCommits is the exit code of a git script run in a repository
// without commits (see runGitLog).
const exitNoCommits = 100

type repoArgs struct {
	Path string `json:"path"`
}

func runGitInit(ctx context.Context, s *Session, sb string, raw json.RawMessage) (*Result, error) {
	var a struct {
		repoArgs
		Branch string `json:"branch"`
	}
	if err := decode(raw, &a); err != nil {
		return nil, err
	}
	if a.Branch == "" {
		a.Branch = "main"
	}
	if a.Path != "" {
		abs, err := s.resolve(ctx, sb, a.Path, false)
		if err != nil {
			return nil, err
		}
		if e, err := s.fs().Stat(ctx, sb, abs); err != nil || e.Type != "dir" {
			if _, err := s.fs().MakeDir(ctx, sb, abs); err != nil {
				return nil, err
			}
		}
	}
	out, err := s.git(ctx, sb, a.Path, `git init -q -b "$1" . 2>/dev/null || { git init -q . && git symbolic-ref HEAD "refs/heads/$1"; } && git rev-parse --absolute-git-dir`, time.Minute, a.Branch)
	if err != nil {
		return nil, err
	}
	return textResult("Initialized an empty git repository (branch %s): %s", a.Branch, strings.TrimSpace(out)), nil
}

func runGitClone(ctx context.Context, s *Session, sb string, raw json.RawMessage) (*Result, error) {
	var a struct {
		URL    string `json:"url"`
		Path   string `json:"path"`
		Branch string `json:"branch"`
		Depth  int    `json:"depth"`
	}
	if err := decode(raw, &a); err != nil {
		return nil, err
	}
	if strings.HasPrefix(a.URL, "-") || strings.HasPrefix(strings.ToLower(a.URL), "ext::") {
		return nil, fail("invalid repository URL %q", a.URL)
	}
	target := a.Path
	if target == "" {
		name := strings.TrimSuffix(path.Base(strings.TrimRight(a.URL, "/")), ".git")
		if name == "" || name == "." || name == "/" {
			return nil, fail("cannot derive a directory name from %q; give path", a.URL)
		}
		target = name
	}
	abs, err := s.resolve(ctx, sb, target, false)
	if err != nil {
		return nil, err
	}
	args := []string{"clone", "--quiet"}
	if a.Branch != "" {
		args = append(args, "--branch", a.Branch)
	}
	if a.Depth > 0 {
		args = append(args, "--depth", strconv.Itoa(a.Depth))
	}
	args = append(args, "--", a.URL, abs)
	if _, err := s.git(ctx, sb, "", `git "$@"`, 15*time.Minute, args...); err != nil {
		return nil, err
	}
	out, _ := s.git(ctx, sb, abs, `git log -1 --format='%h %s' 2>/dev/null; git status --short --branch | head -n 1`, time.Minute)
	return textResult("Cloned %s into %s.\n%s", a.URL, abs, strings.TrimSpace(out)), nil
}

func runGitStatus(ctx context.Context, s *Session, sb string, raw json.RawMessage) (*Result, error) {
	var a repoArgs
	if err := decode(raw, &a); err != nil {
		return nil, err
	}
	out, err := s.git(ctx, sb, a.Path, `git status --short --branch`, time.Minute)
	if err != nil {
		return nil, err
	}
	if strings.Count(strings.TrimSpace(out), "\n") == 0 {
		out = strings.TrimSpace(out) + "\n(nothing to commit, working tree clean)"
	}
	return textResult("%s", strings.TrimSpace(out)), nil
}

func runGitDiff(ctx context.Context, s *Session, sb string, raw json.RawMessage) (*Result, error) {
	var a struct {
		repoArgs
		Staged bool   `json:"staged"`
		Ref    string `json:"ref"`
		File   string `json:"file"`
	}
	if err := decode(raw, &a); err != nil {
		return nil, err
	}
	if strings.HasPrefix(a.Ref, "-") {
		return nil, fail("invalid ref %q", a.Ref)
	}
	args := []string{"diff", "--no-color", "--no-ext-diff"}
	if a.Staged {
		args = append(args, "--staged")
	}
	if a.Ref != "" {
		args = append(args, a.Ref)
	}
	args = append(args, "--")
	if a.File != "" {
		args = append(args, a.File)
	}
	out, err := s.git(ctx, sb, a.Path, `git "$@"`, 2*time.Minute, args...)
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(out) == "" {
		what := "unstaged changes"
		if a.Staged {
			what = "staged changes"
		}
		return textResult("No %s.", what), nil
	}
	text, cut := truncateText(out)
	if cut {
		text += "\n[diff truncated: limit it to one file with file, or write it to a file (shell_exec: git diff > /workspace/diff.txt) and read that with file_read offset/limit]"
	}
	return textResult("%s", text), nil
}

func runGitCommit(ctx context.Context, s *Session, sb string, raw json.RawMessage) (*Result, error) {
	var a struct {
		repoArgs
		Message string   `json:"message"`
		Files   []string `json:"files"`
		Author  string   `json:"author"`
	}
	if err := decode(raw, &a); err != nil {
		return nil, err
	}
	stage := `git add -A`
	if len(a.Files) > 0 {
		stage = `shift 2; git add -- "$@"`
	}
	commit := `git commit -q -m "$1"`
	if a.Author != "" {
		if !strings.Contains(a.Author, "<") || !strings.HasSuffix(a.Author, ">") {
			return nil, fail("author must look like \"Name <email>\"")
		}
		commit = `git commit -q --author="$2" -m "$1"`
	}
	args := append([]string{a.Message, a.Author}, a.Files...)
	script := gitIdentity + `msg="$1"; author="$2"; ` + stage + ` && set -- "$msg" "$author" && if git diff --cached --quiet; then echo "nothing to commit: no changes staged" >&2; exit 1; fi && ` + commit + ` && git log -1 --format='%h %s' && git show --stat --format= HEAD | tail -n 1`
	out, err := s.git(ctx, sb, a.Path, script, 2*time.Minute, args...)
	if err != nil {
		return nil, err
	}
	return textResult("Committed %s", strings.TrimSpace(out)), nil
}

func runGitPush(ctx context.Context, s *Session, sb string, raw json.RawMessage) (*Result, error) {
	var a struct {
		repoArgs
		Remote      string `json:"remote"`
		Branch      string `json:"branch"`
		SetUpstream bool   `json:"set_upstream"`
	}
	if err := decode(raw, &a); err != nil {
		return nil, err
	}
	if strings.HasPrefix(a.Remote, "-") || strings.HasPrefix(a.Branch, "-") {
		return nil, fail("invalid remote or branch")
	}
	if a.Remote == "" {
		a.Remote = "origin"
	}
	args := []string{"push", "--porcelain"}
	if a.SetUpstream {
		args = append(args, "-u")
	}
	args = append(args, a.Remote)
	if a.Branch != "" {
		args = append(args, a.Branch)
	} else {
		args = append(args, "HEAD")
	}
	out, err := s.git(ctx, sb, a.Path, `git "$@"`, 10*time.Minute, args...)
	if err != nil {
		return nil, err
	}
	return textResult("Pushed.\n%s", strings.TrimSpace(out)), nil
}

func runGitLog(ctx context.Context, s *Session, sb string, raw json.RawMessage) (*Result, error) {
	var a struct {
		repoArgs
		MaxCount int    `json:"max_count"`
		File     string `json:"file"`
	}
	if err := decode(raw, &a); err != nil {
		return nil, err
	}
	if a.MaxCount == 0 {
		a.MaxCount = 20
	}
	args := []string{"log", "--no-color", fmt.Sprintf("--max-count=%d", a.MaxCount), "--format=%h %ad %an: %s", "--date=short", "--"}
	if a.File != "" {
		args = append(args, a.File)
	}
	// A repository without commits exits with exitNoCommits; anything
	// else that is not one fails in git log, with git's own message.
	out, err := s.git(ctx, sb, a.Path, `if git rev-parse --git-dir >/dev/null 2>&1 && ! git rev-parse -q --verify HEAD >/dev/null; then exit `+strconv.Itoa(exitNoCommits)+`; fi; git "$@"`, time.Minute, args...)
	var ge *gitError
	if errors.As(err, &ge) && ge.code == exitNoCommits {
		return textResult("No commits yet."), nil
	}
	if err != nil {
		return nil, err
	}
	text, _ := truncateText(strings.TrimSpace(out))
	return textResult("%s", text), nil
}
