package fake

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// killTree kills process pid and every process descended from it. The
// fake has no pid namespace or cgroup whose end takes a sandbox's
// processes along, and the agent starts commands in process groups and
// sessions of their own, so killing the agent alone would leave them
// running on the host. Every process found is stopped before the next
// look, so none forks a child the walk misses; then all are killed.
func killTree(pid int) {
	stopped := map[int]bool{}
	for round := 0; round < 16; round++ {
		fresh := 0
		for _, p := range descendants(pid) {
			if !stopped[p] {
				_ = syscall.Kill(p, syscall.SIGSTOP)
				stopped[p] = true
				fresh++
			}
		}
		if fresh == 0 {
			break
		}
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	for p := range stopped {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
}

// signalTree sends sig to process pid, then to its descendants, parents
// before children.
func signalTree(pid int, sig syscall.Signal) error {
	if err := syscall.Kill(pid, sig); err != nil {
		return err
	}
	for _, p := range descendants(pid)[1:] {
		_ = syscall.Kill(p, sig)
	}
	return nil
}

// descendants returns pid and the pids of its living descendants, read
// from /proc.
func descendants(pid int) []int {
	children := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pp, ok := parentOf(p); ok {
			children[pp] = append(children[pp], p)
		}
	}
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i]]...)
	}
	return out
}

// parentOf reads the parent pid of pid from /proc/PID/stat (the field
// after the state, which follows the command name in parentheses).
func parentOf(pid int) (int, bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0, false
	}
	pp, err := strconv.Atoi(f[1])
	return pp, err == nil
}
