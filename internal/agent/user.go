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
	// threads, when set, keeps OS threads with this user's credentials
	// for do (the default user's; see credThreads).
	threads *credThreads
}

// Identity is a uid and a gid: who the agent acts as for requests that
// name no user (Config.DefaultUser, the agent's --user).
type Identity struct {
	UID, GID uint32
}

// ParseIdentity parses "UID:GID", the agent's --user.
func ParseIdentity(s string) (Identity, error) {
	u, g, ok := strings.Cut(s, ":")
	uid, err1 := strconv.ParseUint(u, 10, 32)
	gid, err2 := strconv.ParseUint(g, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return Identity{}, fmt.Errorf("user %q: want UID:GID", s)
	}
	return Identity{UID: uint32(uid), GID: uint32(gid)}, nil
}

// currentUser describes the identity the agent itself runs as. An account
// missing from passwd (possible with arbitrary uids) still works: name and
// home then come from the environment.
//
// def is Config.DefaultUser: when it names another identity, the
// environment describes that one, not the agent's.
func currentUser(acc *accounts, def *Identity) *User {
	id := Identity{UID: uint32(os.Getuid()), GID: uint32(os.Getgid())}
	u := userOf(acc, id, def == nil || *def == id)
	u.self = true
	return u
}

// userOf describes the account of id: its passwd entry (the gid is id's),
// else, when fromEnv, the name and home of the environment (the backend
// sets USER and HOME to the identity the agent acts as by default), else
// root's or the uid's number.
func userOf(acc *accounts, id Identity, fromEnv bool) *User {
	u := &User{UID: id.UID, GID: id.GID}
	if e, ok := acc.lookupUID(id.UID); ok {
		u.Name, u.Home, u.Shell = e.name, e.home, e.shell
	} else if !fromEnv {
		u.Name = strconv.FormatUint(uint64(id.UID), 10)
		if id.UID == 0 {
			u.Name, u.Home = "root", "/root"
		}
	} else {
		u.Name = os.Getenv("USER")
		if u.Name == "" {
			u.Name = strconv.FormatUint(uint64(id.UID), 10)
		}
		u.Home = os.Getenv("HOME")
	}
	if u.Home == "" {
		u.Home = "/"
	}
	if u.Shell == "" {
		u.Shell = "/bin/sh"
	}
	u.Groups = acc.supplementaryGroups(u.Name, id.GID)
	return u
}

// defaultUser is who requests that name no user act as: id when set and
// not the agent's own identity (an agent running as root of its
// sandbox's user namespace that acts as uid 1000 unless asked otherwise),
// else the agent itself. Its file operations run on kept threads (see
// credThreads): it is the identity nearly every request uses.
func defaultUser(acc *accounts, self *User, id *Identity) *User {
	if id == nil || (id.UID == self.UID && id.GID == self.GID) {
		return self
	}
	u := userOf(acc, *id, true)
	u.threads = credThreadsFor(u)
	return u
}

// resolveUser maps a requested user name onto a User. Empty or the default
// user's name means the default user (Config.DefaultUser, else the agent
// itself). Only an agent running as uid 0 may act as somebody else —
// root of the sandbox's own user namespace, never of the host (see
// docs/security.md); otherwise the request is refused with
// permission_denied, saying why. Unknown users are invalid_argument;
// "root" is uid 0 even where passwd lacks it.
func (s *Server) resolveUser(name string) (*User, error) {
	if name == "" || name == s.def.Name {
		return s.def, nil
	}
	e, ok := s.accounts.lookupName(name)
	if !ok && name == "root" {
		e, ok = passwdEntry{name: "root", home: "/root", shell: "/bin/sh"}, true
	}
	if !ok {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("unknown user %q", name))
	}
	if e.uid == s.def.UID {
		return s.def, nil
	}
	if s.cfg.OnlyDefaultUser != "" {
		return nil, connect.NewError(connect.CodePermissionDenied, fmt.Errorf("cannot act as user %q: %s", name, s.cfg.OnlyDefaultUser))
	}
	if e.uid == s.self.UID {
		return s.self, nil
	}
	if s.self.UID != 0 {
		return nil, connect.NewError(connect.CodePermissionDenied, s.cannotActAs(name))
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

// cannotActAs explains why an agent that is not root refuses to act as
// user name. Where the sandbox has no user namespace of its own (the
// agent's uid map is the host's), root in it would be the host's root:
// that is the case to name, since only a backend with user namespaces can
// serve root there.
func (s *Server) cannotActAs(name string) error {
	why := "only a sandbox created as root can act as another user here"
	if initialUserNamespace() {
		why = "this sandbox has no user namespace of its own, so its root would be the host's root " +
			"(its backend runs sandboxes without one: Docker without userns-remap, Kubernetes without " +
			"user namespaces for pods); agentbox's native backend serves root in any sandbox, " +
			"confined to the sandbox's own user namespace"
	}
	return fmt.Errorf("agent runs as %s (uid %d) and cannot act as user %q: %s", s.self.Name, s.self.UID, name, why)
}

// initialUserNamespace reports whether the agent is in the host's user
// namespace: its uid map is the identity of every id.
func initialUserNamespace() bool {
	b, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return false
	}
	return strings.Join(strings.Fields(string(b)), " ") == "0 0 4294967295"
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
