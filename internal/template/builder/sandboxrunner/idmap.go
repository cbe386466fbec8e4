package sandboxrunner

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// idMap is how a build sandbox maps its ids to the host's: uid u in the
// sandbox is host uid uidBase+u for u < size.
type idMap struct {
	uidBase, gidBase, size uint32
}

func (m idMap) identity() bool { return m.uidBase == 0 && m.gidBase == 0 }
func (m idMap) uid(u uint32) uint32 {
	return m.uidBase + u
}
func (m idMap) gid(g uint32) uint32 { return m.gidBase + g }

// shift maps a host owner between image ids and host ids; ok is false
// when it is outside the range (left alone).
func (m idMap) shift(uid, gid uint32, in bool) (uint32, uint32, bool) {
	if in {
		if uid >= m.size || gid >= m.size {
			return 0, 0, false
		}
		return uid + m.uidBase, gid + m.gidBase, true
	}
	if uid < m.uidBase || uid-m.uidBase >= m.size || gid < m.gidBase || gid-m.gidBase >= m.size {
		return 0, 0, false
	}
	return uid - m.uidBase, gid - m.gidBase, true
}

// readIDMap reads the user namespace mapping of the sandbox's init (its
// uid 0's host id). Without a pid (a backend that does not run sandboxes
// as host processes) ids are taken as the host's.
func readIDMap(pid int) (idMap, error) {
	if pid <= 0 {
		return idMap{size: 1<<32 - 1}, nil
	}
	u, size, err := firstMapping(fmt.Sprintf("/proc/%d/uid_map", pid))
	if err != nil {
		return idMap{}, err
	}
	g, gsize, err := firstMapping(fmt.Sprintf("/proc/%d/gid_map", pid))
	if err != nil {
		return idMap{}, err
	}
	return idMap{uidBase: u, gidBase: g, size: min(size, gsize)}, nil
}

// firstMapping returns the host id and size of the range holding id 0.
func firstMapping(file string) (uint32, uint32, error) {
	f, err := os.Open(file)
	if err != nil {
		return 0, 0, fmt.Errorf("build sandbox id map: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 3 || fields[0] != "0" {
			continue
		}
		host, err1 := strconv.ParseUint(fields[1], 10, 32)
		size, err2 := strconv.ParseUint(fields[2], 10, 32)
		if err1 != nil || err2 != nil {
			break
		}
		return uint32(host), uint32(size), nil
	}
	return 0, 0, fmt.Errorf("build sandbox id map %s: no mapping of id 0", file)
}
