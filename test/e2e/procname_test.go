package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestDaemonProcessName: the daemon re-executes itself from a sealed copy
// (/proc/self/fd/N), which the kernel would name "N"; ps, top and the OOM
// killer's log must show it, and each of its threads, by its binary's name.
func TestDaemonProcessName(t *testing.T) {
	d := startDaemon(t)
	want := filepath.Base(d.cmd.Path)
	dir := filepath.Join("/proc", strconv.Itoa(d.cmd.Process.Pid), "task")
	tasks, err := os.ReadDir(dir)
	if err != nil || len(tasks) == 0 {
		t.Fatalf("threads of the daemon: %v %v", tasks, err)
	}
	for _, task := range tasks {
		comm, err := os.ReadFile(filepath.Join(dir, task.Name(), "comm"))
		if err != nil {
			continue // exited meanwhile
		}
		if got := strings.TrimSpace(string(comm)); got != want {
			t.Errorf("thread %s of the daemon is named %q, want %q", task.Name(), got, want)
		}
	}
}
