package agent

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// accounts reads users and groups from passwd- and group-format files
// without cgo (the agent is a static binary and must work in any root
// filesystem). The parsed tables are cached and re-read when a file's size
// or modification time changes, so user changes made inside the sandbox
// (useradd) are picked up.
type accounts struct {
	passwdPath string
	groupPath  string

	mu         sync.Mutex
	passwdStat fileStamp
	groupStat  fileStamp
	users      []passwdEntry
	groups     []groupEntry
}

type fileStamp struct {
	size  int64
	mtime time.Time
	ok    bool
}

type passwdEntry struct {
	name  string
	uid   uint32
	gid   uint32
	home  string
	shell string
}

type groupEntry struct {
	name    string
	gid     uint32
	members []string
}

func newAccounts(passwdPath, groupPath string) *accounts {
	return &accounts{passwdPath: passwdPath, groupPath: groupPath}
}

func stampOf(path string) fileStamp {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}
	}
	return fileStamp{size: fi.Size(), mtime: fi.ModTime(), ok: true}
}

// refresh re-reads the files whose stamp changed. Must hold a.mu.
func (a *accounts) refresh() {
	if st := stampOf(a.passwdPath); st != a.passwdStat {
		a.passwdStat = st
		a.users = parsePasswd(a.passwdPath)
	}
	if st := stampOf(a.groupPath); st != a.groupStat {
		a.groupStat = st
		a.groups = parseGroup(a.groupPath)
	}
}

// lookupName returns the passwd entry for a user name.
func (a *accounts) lookupName(name string) (passwdEntry, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.refresh()
	for _, u := range a.users {
		if u.name == name {
			return u, true
		}
	}
	return passwdEntry{}, false
}

// lookupUID returns the first passwd entry with the given uid.
func (a *accounts) lookupUID(uid uint32) (passwdEntry, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.refresh()
	for _, u := range a.users {
		if u.uid == uid {
			return u, true
		}
	}
	return passwdEntry{}, false
}

// userName renders a uid as a name, or as a number when unknown.
func (a *accounts) userName(uid uint32) string {
	if u, ok := a.lookupUID(uid); ok {
		return u.name
	}
	return strconv.FormatUint(uint64(uid), 10)
}

// groupName renders a gid as a name, or as a number when unknown.
func (a *accounts) groupName(gid uint32) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.refresh()
	for _, g := range a.groups {
		if g.gid == gid {
			return g.name
		}
	}
	return strconv.FormatUint(uint64(gid), 10)
}

// supplementaryGroups returns the primary gid followed by every group that
// lists user as a member, without duplicates.
func (a *accounts) supplementaryGroups(user string, primary uint32) []uint32 {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.refresh()
	gids := []uint32{primary}
	for _, g := range a.groups {
		if g.gid == primary {
			continue
		}
		for _, m := range g.members {
			if m == user {
				gids = append(gids, g.gid)
				break
			}
		}
	}
	return gids
}

// parsePasswd parses name:pw:uid:gid:gecos:home:shell lines, skipping
// malformed ones. A missing file yields no entries.
func parsePasswd(path string) []passwdEntry {
	var out []passwdEntry
	_ = scanColonFile(path, func(f []string) {
		if len(f) < 7 {
			return
		}
		uid, err1 := strconv.ParseUint(f[2], 10, 32)
		gid, err2 := strconv.ParseUint(f[3], 10, 32)
		if err1 != nil || err2 != nil || f[0] == "" {
			return
		}
		out = append(out, passwdEntry{name: f[0], uid: uint32(uid), gid: uint32(gid), home: f[5], shell: f[6]})
	})
	return out
}

// parseGroup parses name:pw:gid:member,member lines.
func parseGroup(path string) []groupEntry {
	var out []groupEntry
	_ = scanColonFile(path, func(f []string) {
		if len(f) < 4 {
			return
		}
		gid, err := strconv.ParseUint(f[2], 10, 32)
		if err != nil || f[0] == "" {
			return
		}
		var members []string
		for _, m := range strings.Split(f[3], ",") {
			if m = strings.TrimSpace(m); m != "" {
				members = append(members, m)
			}
		}
		out = append(out, groupEntry{name: f[0], gid: uint32(gid), members: members})
	})
	return out
}

func scanColonFile(path string, fn func([]string)) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		fn(strings.Split(line, ":"))
	}
	return sc.Err()
}
