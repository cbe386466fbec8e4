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

// rangeSize is how many ids a sandbox maps (0-65535).
const rangeSize = 1 << 16

// nobodyID is what an id no sandbox could have made becomes.
const nobodyID = 65534

// HostIDs says where sandboxes' ids lie on the host: Ranges ranges of
// 65536 host ids (uids and gids alike) from Base, one per sandbox, and
// Resting, the first id of one of them that no sandbox is given. Files
// kept between steps (cache mounts) belong to the resting range, so at
// rest on the host they are owned by no account and no running process.
type HostIDs struct {
	Base, Ranges, Resting uint32
}

// resting returns the resting range; ok is false when there is none.
func (h HostIDs) resting() (idMap, bool) {
	if h.Resting == 0 {
		return idMap{}, false
	}
	return idMap{uidBase: h.Resting, gidBase: h.Resting, size: rangeSize}, true
}

// offset returns the id that host id stands for in any sandbox: ids of
// the sandboxes' ranges (a step's, the resting one's) relative to their
// range, ids below 65536 as they are (image ids, as an earlier version
// kept caches between steps), and any other id, which no sandbox can make,
// as nobody.
func (h HostIDs) offset(id uint32) uint32 {
	switch {
	case id < rangeSize:
		return id
	case id >= h.Base && uint64(id) < uint64(h.Base)+uint64(h.Ranges)*rangeSize:
		return (id - h.Base) % rangeSize
	default:
		return nobodyID
	}
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
