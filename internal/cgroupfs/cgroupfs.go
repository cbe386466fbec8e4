// Package cgroupfs reads the counters and limits backends take from cgroup
// files (cgroup v1 and v2 alike). A file that cannot be read counts as 0:
// callers read optional counters of controllers a host may not have.
package cgroupfs

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// ReadInt returns the single number in path; "max" (no limit) is -1.
func ReadInt(path string) int64 {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	s := strings.TrimSpace(string(data))
	if s == "max" {
		return -1
	}
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// ReadKey returns the value of "key N" in a flat-keyed cgroup file
// (memory.stat, memory.events, pids.events ...).
func ReadKey(path, key string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 2 && fields[0] == key {
			n, _ := strconv.ParseInt(fields[1], 10, 64)
			return n
		}
	}
	return 0
}
