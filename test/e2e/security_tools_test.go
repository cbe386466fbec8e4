package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
)

// TestSecurityToolKitHostileGit drives the tool kit's git, pip and npm
// tools (over MCP, as a model would) with hostile repositories and
// arguments: a repository whose .git/config names an fsmonitor command and
// whose hooks and symlinks lead out, options smuggled in as URLs, refs,
// branches, remotes, paths and package names, transports that run
// commands (ext::). What a repository or an argument makes run must run
// inside the sandbox as its user, never in the daemon on the host, and no
// value may become an option or a shell command.
func TestSecurityToolKitHostileGit(t *testing.T) {
	d := startDaemon(t, "API_KEYS="+mcpAliceKey+":alice")
	cs := mcpHTTP(t, d, mcpAliceKey, "/mcp")

	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	mark := "/tmp/agentbox-pwned-" + hex.EncodeToString(rnd[:])
	noMark := func(what string) {
		t.Helper()
		if _, err := os.Stat(mark); err == nil {
			os.Remove(mark)
			t.Fatalf("%s: ran on the host (the daemon's side): %s exists", what, mark)
		}
		if got := mustTool(t, cs, "shell_exec", map[string]any{"command": "ls -d " + mark + " /workspace/pwned 2>/dev/null; true"}); strings.Contains(got, mark) || strings.Contains(got, "pwned") {
			t.Fatalf("%s: an argument became an option or a command: %q", what, got)
		}
	}

	// A hostile repository: .git/config runs a command on every status,
	// a hook, symlinks out of /workspace.
	mustTool(t, cs, "shell_exec", map[string]any{"command": `set -e
mkdir -p /workspace/evil && cd /workspace/evil && git init -q .
git config core.fsmonitor 'id -u > ` + mark + `-fsmonitor #'
ln -s /etc/passwd escape; ln -s /etc etcdir; echo hi > f
git add -A && git -c user.email=a@b.invalid -c user.name=a commit -qm one
printf '#!/bin/sh\nid -u > /tmp/hook-ran\n' > .git/hooks/post-checkout && chmod +x .git/hooks/post-checkout`})

	// The repository's command runs, in the sandbox, as its user.
	mustTool(t, cs, "git_status", map[string]any{"path": "evil"})
	if got := mustTool(t, cs, "shell_exec", map[string]any{"command": "cat " + mark + "-fsmonitor; rm " + mark + "-fsmonitor"}); got != "1000\n" {
		t.Errorf("core.fsmonitor of a repository: %q, want it run in the sandbox as uid 1000", got)
	}
	if _, err := os.Stat(mark + "-fsmonitor"); err == nil {
		os.Remove(mark + "-fsmonitor")
		t.Fatalf("core.fsmonitor of a sandbox's repository ran on the host")
	}
	// Cloning it copies no hook and runs none; its links stay links that
	// the file tools refuse to follow out of /workspace.
	mustTool(t, cs, "git_clone", map[string]any{"url": "/workspace/evil", "path": "evil-clone"})
	if got := mustTool(t, cs, "shell_exec", map[string]any{"command": "ls /tmp/hook-ran 2>&1; ls /workspace/evil-clone/.git/hooks | grep -v sample; readlink /workspace/evil-clone/escape"}); !strings.Contains(got, "No such file") || !strings.HasSuffix(got, "/etc/passwd\n") {
		t.Errorf("clone of a hostile repository: %q", got)
	}
	failTool(t, cs, "file_read", map[string]any{"path": "evil-clone/escape"}, `leads out of the workspace`)
	failTool(t, cs, "file_read", map[string]any{"path": "evil-clone/etcdir/passwd"}, `leads out of the workspace`)
	failTool(t, cs, "file_write", map[string]any{"path": "evil-clone/etcdir/x", "content": "x"}, `leads out of the workspace`)

	// Options and commands smuggled into git's command lines.
	touch := "touch% " + mark
	failTool(t, cs, "git_clone", map[string]any{"url": "--upload-pack=touch " + mark, "path": "c1"}, `invalid repository URL`)
	failTool(t, cs, "git_clone", map[string]any{"url": "-u" + "touch " + mark, "path": "c1"}, `invalid repository URL`)
	failTool(t, cs, "git_clone", map[string]any{"url": "ext::sh -c " + touch, "path": "c1"}, `invalid repository URL`)
	failTool(t, cs, "git_clone", map[string]any{"url": "EXT::sh -c " + touch, "path": "c1"}, `invalid repository URL`)
	failTool(t, cs, "git_clone", map[string]any{"url": " --upload-pack=touch " + mark, "path": "c2"}, `git failed`)
	failTool(t, cs, "git_clone", map[string]any{"url": "/workspace/evil", "path": "c3", "branch": "--upload-pack=touch " + mark}, `git failed`)
	failTool(t, cs, "git_clone", map[string]any{"url": "/workspace/evil/.."}, `outside the workspace`)
	noMark("git_clone")
	failTool(t, cs, "git_diff", map[string]any{"path": "evil", "ref": "--output=/workspace/pwned"}, `invalid ref`)
	mustTool(t, cs, "git_diff", map[string]any{"path": "evil", "file": "--output=/workspace/pwned"})
	mustTool(t, cs, "git_log", map[string]any{"path": "evil", "file": "--output=/workspace/pwned"})
	noMark("git_diff, git_log")
	failTool(t, cs, "git_push", map[string]any{"path": "evil-clone", "remote": "--receive-pack=touch " + mark}, `invalid remote`)
	failTool(t, cs, "git_push", map[string]any{"path": "evil-clone", "remote": "origin", "branch": "--receive-pack=touch " + mark}, `invalid remote`)
	// Not refused by the tool: git itself never allows ext:: (and it would
	// run in the sandbox anyway).
	failTool(t, cs, "git_push", map[string]any{"path": "evil-clone", "remote": "ext::sh -c " + touch}, `git failed`)
	failTool(t, cs, "git_commit", map[string]any{"path": "evil-clone", "message": "x", "author": "--exec=touch " + mark}, `author must look like`)
	mustTool(t, cs, "file_write", map[string]any{"path": "evil-clone/new.txt", "content": "x\n"})
	mustTool(t, cs, "git_commit", map[string]any{"path": "evil-clone", "message": "$(touch " + mark + ")", "files": []string{"new.txt"}, "author": "`touch " + mark + "` <a@b.invalid>"})
	callTool(t, cs, "git_init", map[string]any{"path": "fresh", "branch": "x$(touch " + mark + ")"})
	noMark("git_push, git_commit, git_init")

	// Package managers: options refused, names passed as names.
	for _, pkg := range []string{"--index-url=http://127.0.0.1:1/", " -r/etc/passwd", "-e.", "--prefix=/"} {
		failTool(t, cs, "pip_install", map[string]any{"packages": []string{"requests", pkg}}, `not options`)
		failTool(t, cs, "npm_install", map[string]any{"packages": []string{pkg}}, `not options`)
	}
	callTool(t, cs, "pip_install", map[string]any{"packages": []string{"x; touch " + mark, "$(touch " + mark + ")"}})
	callTool(t, cs, "npm_install", map[string]any{"packages": []string{"x; touch " + mark}, "path": "$(touch " + mark + ")"})
	noMark("pip_install, npm_install")
}

// TestSecurityAgentscopeWatcherHostileRepo: agentscope's git watcher
// (commit_changes, generate_diff, git_logs) runs git in a /workspace whose
// .git/config the sandbox's code writes. An fsmonitor command, a clean
// filter and a pre-commit hook of that repository run, in the sandbox as
// its user (what sandbox code can do anyway), never in the daemon; commit
// names are never options.
func TestSecurityAgentscopeWatcherHostileRepo(t *testing.T) {
	d := startDaemon(t, "API_KEYS="+secAliceKey+":alice")
	status, body := asCall(t, d, "create", secAliceKey, map[string]any{"sandbox_type": "filesystem"})
	id, _ := body["data"].(string)
	if status != 200 || id == "" {
		t.Fatalf("create: %d %v", status, body)
	}
	defer asCall(t, d, "release", secAliceKey, map[string]any{"identity": id})
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	mark := "/tmp/agentbox-watcher-" + hex.EncodeToString(rnd[:])
	asShell(t, d, secAliceKey, id, `cd /workspace && git rev-parse --git-dir >/dev/null &&
git config core.fsmonitor 'id -u > `+mark+`-fsmonitor #' &&
git config filter.evil.clean 'id -u > `+mark+`-filter; cat' && echo '* filter=evil' > .gitattributes &&
mkdir -p /workspace/.hooks && printf '#!/bin/sh\nid -u > `+mark+`-hook\n' > /workspace/.hooks/pre-commit && chmod +x /workspace/.hooks/pre-commit &&
git config core.hooksPath /workspace/.hooks && echo data > f.txt`)
	status, data := d.call(t, "POST", "/proxy/"+id+"/watcher/commit_changes", secAliceKey, map[string]any{"commit_message": "--amend"})
	if status != 200 || !strings.Contains(string(data), `"message":"--amend"`) {
		t.Fatalf("commit_changes: %d %s", status, data)
	}
	got := asShell(t, d, secAliceKey, id, "cat "+mark+"-fsmonitor "+mark+"-filter "+mark+"-hook")
	if got != "1000\n1000\n1000\n" {
		t.Errorf("the repository's fsmonitor, filter and hook: %q, want each run in the sandbox as uid 1000", got)
	}
	for _, suffix := range []string{"-fsmonitor", "-filter", "-hook"} {
		if _, err := os.Stat(mark + suffix); err == nil {
			os.Remove(mark + suffix)
			t.Errorf("the sandbox repository's %s ran on the host", suffix)
		}
	}
	for _, rev := range []string{"--output=/workspace/pwned", "HEAD;touch /workspace/pwned", "$(touch /workspace/pwned)"} {
		if status, data := d.call(t, "POST", "/proxy/"+id+"/watcher/generate_diff", secAliceKey, map[string]any{"commit_a": rev}); status == 200 {
			t.Errorf("generate_diff with commit %q: %d %s", rev, status, data)
		}
	}
	if status, data := d.call(t, "GET", "/proxy/"+id+"/watcher/git_logs", secAliceKey, nil); status != 200 || !strings.Contains(string(data), "--amend") {
		t.Errorf("git_logs: %d %.300s", status, data)
	}
	if got := asShell(t, d, secAliceKey, id, "ls /workspace/pwned 2>&1; true"); !strings.Contains(got, "No such file") {
		t.Errorf("a commit name became an option or a command: %q", got)
	}
}
