package agent

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"connectrpc.com/connect"
)

// User is an account that processes and file operations run as.
type User struct {
	Name   string
	UID    uint32
	GID    uint32
	Groups []uint32 // primary group first, then supplementary groups
	Home   string
	Shell  string

	// Workdir, when set, is where relative paths resolve instead of Home
	// (E2B's working directory: see Server.requestUser).
	Workdir string

	// self marks the agent's own identity: nothing needs switching.
	self bool
}

// currentUser describes the identity the agent itself runs as. An account
// missing from passwd (possible with arbitrary uids) still works: name and
// home then come from the environment.
func currentUser(acc *accounts) *User {
	uid, gid := uint32(os.Getuid()), uint32(os.Getgid())
	u := &User{UID: uid, GID: gid, self: true}
	if e, ok := acc.lookupUID(uid); ok {
		u.Name, u.Home, u.Shell = e.name, e.home, e.shell
	} else {
		u.Name = os.Getenv("USER")
		if u.Name == "" {
			u.Name = strconv.FormatUint(uint64(uid), 10)
		}
		u.Home = os.Getenv("HOME")
	}
	if u.Home == "" {
		u.Home = "/"
	}
	if u.Shell == "" {
		u.Shell = "/bin/sh"
	}
	u.Groups = acc.supplementaryGroups(u.Name, gid)
	return u
}

// resolveUser maps a requested user name onto a User. Empty or the agent's
// own name means the agent itself. Only an agent running as uid 0 may act
// as somebody else; otherwise the request is refused with
// permission_denied. Unknown users are invalid_argument.
func (s *Server) resolveUser(name string) (*User, error) {
	if name == "" || name == s.self.Name {
		return s.self, nil
	}
	e, ok := s.accounts.lookupName(name)
	if !ok {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("unknown user %q", name))
	}
	if e.uid == s.self.UID {
		return s.self, nil
	}
	if s.self.UID != 0 {
		return nil, connect.NewError(connect.CodePermissionDenied,
			fmt.Errorf("agent runs as %s (uid %d) and cannot act as user %q; only a root sandbox can switch users",
				s.self.Name, s.self.UID, name))
	}
	u := &User{Name: e.name, UID: e.uid, GID: e.gid, Home: e.home, Shell: e.shell}
	if u.Home == "" {
		u.Home = "/"
	}
	if u.Shell == "" {
		u.Shell = "/bin/sh"
	}
	u.Groups = s.accounts.supplementaryGroups(e.name, e.gid)
	return u, nil
}

// userFromRequest picks the user an E2B client asked for: the username
// query parameter (REST only) or else the name in
// "Authorization: Basic base64(<user>:)".
func (s *Server) userFromRequest(h http.Header, query string) (*User, error) {
	name := query
	if name == "" {
		name = basicAuthUser(h)
	}
	return s.requestUser(h, name)
}

// requestUser resolves name for a request with headers h. In E2B's
// dialect the user's relative paths, and processes started without a cwd,
// use E2B's working directory (see e2bWorkdir).
func (s *Server) requestUser(h http.Header, name string) (*User, error) {
	u, err := s.resolveUser(name)
	if err != nil || !e2bDialect(h) {
		return u, err
	}
	cu := *u
	cu.Workdir = s.e2bWorkdir(u)
	return &cu, nil
}

// agentboxWorkspace is agentbox's own working directory (the native API's
// and agentscope's), the --workdir of sandboxes whose template sets none
// of its own.
const agentboxWorkspace = "/workspace"

// e2bWorkdir is E2B's working directory for u: the template's (the
// agent's --workdir, as E2B's setWorkdir sets it) unless that is
// agentbox's /workspace, which E2B's conventions replace with the user's
// home; the home too when the directory is missing.
func (s *Server) e2bWorkdir(u *User) string {
	if w := s.cfg.Workdir; w != "" && w != agentboxWorkspace {
		var ok bool
		_ = u.do(func() error {
			fi, err := os.Stat(w)
			ok = err == nil && fi.IsDir()
			return nil
		})
		if ok {
			return w
		}
	}
	return u.Home
}

// basicAuthUser extracts the user name of a Basic authorization header; the
// password part is ignored (E2B sends none).
func basicAuthUser(h http.Header) string {
	v, ok := strings.CutPrefix(h.Get("Authorization"), "Basic ")
	if !ok {
		return ""
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(v))
	if err != nil {
		return ""
	}
	name, _, _ := strings.Cut(string(raw), ":")
	return name
}

// resolvePath makes p absolute the E2B way: "~" and "~/x" expand to the
// user's home, other relative paths are relative to u.Workdir if set, else
// to the home too.
func (u *User) resolvePath(p string) (string, error) {
	if p == "" {
		return "", connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path is empty"))
	}
	switch {
	case p == "~":
		return filepath.Clean(u.Home), nil
	case strings.HasPrefix(p, "~/"):
		return filepath.Join(u.Home, p[2:]), nil
	case filepath.IsAbs(p):
		return filepath.Clean(p), nil
	case u.Workdir != "":
		return filepath.Join(u.Workdir, p), nil
	default:
		return filepath.Join(u.Home, p), nil
	}
}
