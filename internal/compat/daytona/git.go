package daytona

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/dataplane"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// Git is the sandbox's own git, run as the sandbox's user through the
// data plane (the template must have git: base has).

func (s *Server) registerGit(t func(string, toolbox)) {
	t("POST /git/clone", s.gitClone)
	t("POST /git/init", s.gitInit)
	t("POST /git/add", s.gitAdd)
	t("POST /git/commit", s.gitCommit)
	t("GET /git/status", s.gitStatus)
	t("GET /git/branches", s.gitBranches)
	t("POST /git/branches", s.gitCreateBranch)
	t("DELETE /git/branches", s.gitDeleteBranch)
	t("POST /git/checkout", s.gitCheckout)
	t("GET /git/history", s.gitHistory)
	t("POST /git/pull", s.gitPull)
	t("POST /git/push", s.gitPush)
}

// gitTimeout bounds one git command.
const gitTimeout = 5 * time.Minute

// git runs git with args in dir and returns its stdout; a failure is a
// Daytona 400 with git's own message.
func (s *Server) git(r *http.Request, req *dataplane.Request, dir string, args ...string) (string, error) {
	cmd := append([]string{"git"}, args...)
	if dir != "" {
		cmd = append([]string{"git", "-C", dir}, args...)
	}
	res, err := req.ExecBuffered(r.Context(), dataplane.ExecRequest{Cmd: cmd, User: s.userOf(r), Timeout: gitTimeout,
		Env: map[string]string{"GIT_TERMINAL_PROMPT": "0"}})
	if err != nil {
		return "", err
	}
	if res.ExitCode != 0 {
		msg := strings.TrimSpace(string(res.Stderr))
		if msg == "" {
			msg = strings.TrimSpace(string(res.Stdout))
		}
		return "", &codedError{status: http.StatusBadRequest, code: "GIT_FAILED", msg: "git " + args[0] + ": " + msg}
	}
	return string(res.Stdout), nil
}

type gitIn struct {
	URL           string   `json:"url"`
	Path          string   `json:"path"`
	Branch        string   `json:"branch"`
	CommitID      string   `json:"commit_id"`
	Depth         int      `json:"depth"`
	Username      string   `json:"username"`
	Password      string   `json:"password"`
	Files         []string `json:"files"`
	Message       string   `json:"message"`
	Author        string   `json:"author"`
	Email         string   `json:"email"`
	AllowEmpty    bool     `json:"allow_empty"`
	Name          string   `json:"name"`
	Bare          bool     `json:"bare"`
	InitialBranch string   `json:"initial_branch"`
}

func decodeGit(w http.ResponseWriter, r *http.Request) (gitIn, error) {
	var in gitIn
	if err := decodeBody(w, r, &in); err != nil {
		return in, err
	}
	if in.Path == "" {
		return in, sandbox.Invalid("path", "path is required")
	}
	return in, nil
}

func (s *Server) gitClone(w http.ResponseWriter, r *http.Request, req *dataplane.Request) error {
	in, err := decodeGit(w, r)
	if err != nil {
		return err
	}
	u, err := url.Parse(in.URL)
	if err != nil || in.URL == "" || strings.HasPrefix(in.URL, "-") {
		return sandbox.Invalid("url", "url must be a repository URL")
	}
	if in.Username != "" || in.Password != "" {
		u.User = url.UserPassword(in.Username, in.Password)
	}
	args := []string{"clone"}
	if in.Branch != "" {
		args = append(args, "--branch", in.Branch)
	}
	if in.Depth > 0 {
		args = append(args, "--depth", strconv.Itoa(in.Depth))
	}
	if _, err := s.git(r, req, "", append(args, "--", u.String(), in.Path)...); err != nil {
		return err
	}
	if in.CommitID != "" {
		if _, err := s.git(r, req, in.Path, "checkout", in.CommitID); err != nil {
			return err
		}
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

func (s *Server) gitInit(w http.ResponseWriter, r *http.Request, req *dataplane.Request) error {
	in, err := decodeGit(w, r)
	if err != nil {
		return err
	}
	args := []string{"init"}
	if in.Bare {
		args = append(args, "--bare")
	}
	if in.InitialBranch != "" {
		args = append(args, "--initial-branch", in.InitialBranch)
	}
	if _, err := s.git(r, req, "", append(args, "--", in.Path)...); err != nil {
		return err
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

func (s *Server) gitAdd(w http.ResponseWriter, r *http.Request, req *dataplane.Request) error {
	in, err := decodeGit(w, r)
	if err != nil {
		return err
	}
	if len(in.Files) == 0 {
		return sandbox.Invalid("files", "files is required")
	}
	if _, err := s.git(r, req, in.Path, append([]string{"add", "--"}, in.Files...)...); err != nil {
		return err
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

func (s *Server) gitCommit(w http.ResponseWriter, r *http.Request, req *dataplane.Request) error {
	in, err := decodeGit(w, r)
	if err != nil {
		return err
	}
	if in.Message == "" || in.Author == "" || in.Email == "" {
		return sandbox.Invalid("message", "message, author and email are required")
	}
	args := []string{"-c", "user.name=" + in.Author, "-c", "user.email=" + in.Email, "commit", "-m", in.Message}
	if in.AllowEmpty {
		args = append(args, "--allow-empty")
	}
	if _, err := s.git(r, req, in.Path, args...); err != nil {
		return err
	}
	hash, err := s.git(r, req, in.Path, "rev-parse", "HEAD")
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]string{"hash": strings.TrimSpace(hash)})
	return nil
}

// statusName is Daytona's name of a porcelain status letter.
func statusName(c byte) string {
	switch c {
	case ' ':
		return "Unmodified"
	case '?':
		return "Untracked"
	case 'M', 'T':
		return "Modified"
	case 'A':
		return "Added"
	case 'D':
		return "Deleted"
	case 'R':
		return "Renamed"
	case 'C':
		return "Copied"
	case 'U':
		return "Updated but unmerged"
	}
	return "Unmodified"
}

func (s *Server) gitStatus(w http.ResponseWriter, r *http.Request, req *dataplane.Request) error {
	dir, err := pathParam(r, "path")
	if err != nil {
		return err
	}
	out, err := s.git(r, req, dir, "status", "--porcelain=v2", "--branch", "-z")
	if err != nil {
		return err
	}
	st := map[string]any{"currentBranch": "", "ahead": 0, "behind": 0, "branchPublished": false, "detached": false}
	files := []map[string]string{}
	for _, rec := range strings.Split(out, "\x00") {
		switch {
		case strings.HasPrefix(rec, "# branch.head "):
			head := strings.TrimPrefix(rec, "# branch.head ")
			st["currentBranch"], st["detached"] = head, head == "(detached)"
		case strings.HasPrefix(rec, "# branch.upstream "):
			st["upstream"], st["branchPublished"] = strings.TrimPrefix(rec, "# branch.upstream "), true
		case strings.HasPrefix(rec, "# branch.ab "):
			var a, b int
			for _, f := range strings.Fields(strings.TrimPrefix(rec, "# branch.ab ")) {
				if n, err := strconv.Atoi(f[1:]); err == nil {
					if f[0] == '+' {
						a = n
					} else {
						b = n
					}
				}
			}
			st["ahead"], st["behind"] = a, b
		case strings.HasPrefix(rec, "? "):
			files = append(files, map[string]string{"name": rec[2:], "staging": "Untracked", "worktree": "Untracked", "extra": ""})
		case strings.HasPrefix(rec, "1 ") || strings.HasPrefix(rec, "2 ") || strings.HasPrefix(rec, "u "):
			// Fields before the path: 1 has 8, 2 has 9, u has 10.
			f := strings.SplitN(rec, " ", map[byte]int{'1': 9, '2': 10, 'u': 11}[rec[0]])
			n := len(f)
			xy := f[1]
			files = append(files, map[string]string{"name": f[n-1], "staging": statusName(xy[0]), "worktree": statusName(xy[1]), "extra": ""})
		}
	}
	st["fileStatus"] = files
	writeJSON(w, http.StatusOK, st)
	return nil
}

func (s *Server) gitBranches(w http.ResponseWriter, r *http.Request, req *dataplane.Request) error {
	dir, err := pathParam(r, "path")
	if err != nil {
		return err
	}
	out, err := s.git(r, req, dir, "branch", "--format=%(HEAD)%(refname:short)")
	if err != nil {
		return err
	}
	branches, current := []string{}, ""
	for _, line := range strings.Split(out, "\n") {
		if len(line) < 2 { // "*name" or " name"
			continue
		}
		name := line[1:]
		if line[0] == '*' {
			current = name
		}
		branches = append(branches, name)
	}
	writeJSON(w, http.StatusOK, map[string]any{"branches": branches, "current": current})
	return nil
}

func (s *Server) gitCreateBranch(w http.ResponseWriter, r *http.Request, req *dataplane.Request) error {
	in, err := decodeGit(w, r)
	if err != nil {
		return err
	}
	if in.Name == "" || strings.HasPrefix(in.Name, "-") {
		return sandbox.Invalid("name", "name must be a branch name")
	}
	if _, err := s.git(r, req, in.Path, "branch", in.Name); err != nil {
		return err
	}
	w.WriteHeader(http.StatusCreated)
	return nil
}

func (s *Server) gitDeleteBranch(w http.ResponseWriter, r *http.Request, req *dataplane.Request) error {
	in, err := decodeGit(w, r)
	if err != nil {
		return err
	}
	if in.Name == "" || strings.HasPrefix(in.Name, "-") {
		return sandbox.Invalid("name", "name must be a branch name")
	}
	if _, err := s.git(r, req, in.Path, "branch", "-D", in.Name); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) gitCheckout(w http.ResponseWriter, r *http.Request, req *dataplane.Request) error {
	in, err := decodeGit(w, r)
	if err != nil {
		return err
	}
	if in.Branch == "" || strings.HasPrefix(in.Branch, "-") {
		return sandbox.Invalid("branch", "branch must be a branch name")
	}
	if _, err := s.git(r, req, in.Path, "checkout", in.Branch); err != nil {
		return err
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

func (s *Server) gitHistory(w http.ResponseWriter, r *http.Request, req *dataplane.Request) error {
	dir, err := pathParam(r, "path")
	if err != nil {
		return err
	}
	out, err := s.git(r, req, dir, "log", "-z", "--max-count=1000", "--format=%H%x1f%an%x1f%ae%x1f%aI%x1f%B")
	if err != nil {
		return err
	}
	commits := []map[string]string{}
	for _, rec := range strings.Split(out, "\x00") {
		f := strings.SplitN(strings.TrimLeft(rec, "\n"), "\x1f", 5)
		if len(f) == 5 {
			commits = append(commits, map[string]string{"hash": f[0], "author": f[1], "email": f[2], "timestamp": f[3], "message": strings.TrimSpace(f[4])})
		}
	}
	writeJSON(w, http.StatusOK, commits)
	return nil
}

func (s *Server) gitPull(w http.ResponseWriter, r *http.Request, req *dataplane.Request) error {
	return s.gitRemote(w, r, req, "pull")
}

func (s *Server) gitPush(w http.ResponseWriter, r *http.Request, req *dataplane.Request) error {
	return s.gitRemote(w, r, req, "push")
}

// gitRemote is pull or push of the current branch; credentials are not
// taken (use a URL the sandbox can reach without them).
func (s *Server) gitRemote(w http.ResponseWriter, r *http.Request, req *dataplane.Request, op string) error {
	in, err := decodeGit(w, r)
	if err != nil {
		return err
	}
	if in.Username != "" || in.Password != "" {
		return unsupported("credentials for git " + op)
	}
	if _, err := s.git(r, req, in.Path, op); err != nil {
		return err
	}
	w.WriteHeader(http.StatusOK)
	return nil
}
