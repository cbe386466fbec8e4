package builder

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// maxIDFileBytes bounds /etc/passwd and /etc/group read from a layer.
const maxIDFileBytes = 4 << 20

// owner is a resolved uid:gid.
type owner struct {
	UID, GID int
}

// resolveChown resolves a --chown value ("user", "user:group", numeric or
// names) against the stage's /etc/passwd and /etc/group, as Docker does:
// a user without a group gets the user's primary group (its own id when
// numeric).
func resolveChown(v *rootView, spec string) (owner, error) {
	userPart, groupPart, hasGroup := strings.Cut(spec, ":")
	if userPart == "" || (hasGroup && groupPart == "") {
		return owner{}, fmt.Errorf("invalid --chown %q: want USER[:GROUP]", spec)
	}
	var o owner
	if n, err := parseID(userPart); err == nil {
		o.UID, o.GID = n, n
	} else {
		uid, gid, err := lookupPasswd(v, userPart)
		if err != nil {
			return owner{}, fmt.Errorf("--chown %q: %w", spec, err)
		}
		o.UID, o.GID = uid, gid
	}
	if !hasGroup {
		return o, nil
	}
	if n, err := parseID(groupPart); err == nil {
		o.GID = n
		return o, nil
	}
	gid, err := lookupGroup(v, groupPart)
	if err != nil {
		return owner{}, fmt.Errorf("--chown %q: %w", spec, err)
	}
	o.GID = gid
	return o, nil
}

func parseID(s string) (int, error) {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, err
	}
	return int(n), nil
}

// lookupPasswd finds name in the view's /etc/passwd.
func lookupPasswd(v *rootView, name string) (uid, gid int, err error) {
	fields, err := lookupIDFile(v, "/etc/passwd", name, 4)
	if err != nil {
		return 0, 0, fmt.Errorf("user %q: %w", name, err)
	}
	uid, err1 := parseID(fields[2])
	gid, err2 := parseID(fields[3])
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("user %q: malformed /etc/passwd entry", name)
	}
	return uid, gid, nil
}

// lookupGroup finds name in the view's /etc/group.
func lookupGroup(v *rootView, name string) (int, error) {
	fields, err := lookupIDFile(v, "/etc/group", name, 3)
	if err != nil {
		return 0, fmt.Errorf("group %q: %w", name, err)
	}
	gid, err := parseID(fields[2])
	if err != nil {
		return 0, fmt.Errorf("group %q: malformed /etc/group entry", name)
	}
	return gid, nil
}

func lookupIDFile(v *rootView, file, name string, minFields int) ([]string, error) {
	data, err := v.readFile(file, maxIDFileBytes)
	if err != nil {
		return nil, fmt.Errorf("no %s in the stage's root filesystem to look it up (%v)", file, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		f := strings.Split(line, ":")
		if len(f) >= minFields && f[0] == name {
			return f, nil
		}
	}
	return nil, fmt.Errorf("not found in %s", file)
}
