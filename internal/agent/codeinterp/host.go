package codeinterp

import (
	"os"
	"syscall"
)

// Host is what the agent provides to run interpreters: identities,
// directories, environments and reaper-safe process creation.
type Host interface {
	// Resolve checks that user exists (and may be acted as) and that cwd
	// is a directory the user can enter. An empty user means the agent's
	// own; an empty cwd means the default working directory. It returns
	// the canonical user name and the absolute directory.
	Resolve(user, cwd string) (name, dir string, err error)
	// Env returns the environment a process of user starts with now
	// (the agent's default environment plus the user's identity).
	Env(user string) (map[string]string, error)
	// LookPath finds an executable in the PATH of env, or fails.
	LookPath(name string, env map[string]string) (string, error)
	// Spawn starts a process in its own process group as described.
	Spawn(spec SpawnSpec) (Proc, *Pipes, error)
}

// SpawnSpec describes an interpreter process.
type SpawnSpec struct {
	Path string   // absolute path of the executable
	Argv []string // argv, including argv[0]
	Env  []string // complete environment, KEY=VALUE
	Dir  string
	User string
	// StdinPipe gives the child a stdin pipe (Pipes.Stdin); otherwise its
	// stdin is /dev/null.
	StdinPipe bool
	// Control gives the child a pipe on fd 3 it reads from
	// (Pipes.Control); otherwise fd 3 is /dev/null.
	Control bool
	// Events gives the child a pipe on fd 4 it writes to (Pipes.Events).
	Events bool
}

// Pipes are the agent's ends of a spawned process's pipes; unrequested
// ones are nil. Stdout and Stderr are always present. The files support
// deadlines (they are registered with the runtime poller), except the
// mark ends.
type Pipes struct {
	Stdin   *os.File
	Stdout  *os.File
	Stderr  *os.File
	Control *os.File
	Events  *os.File
	// StdoutMark and StderrMark are write ends of the stdout and stderr
	// pipes that the agent keeps to append end-of-execution markers (see
	// marker.go). They are blocking: write to them off the caller's path.
	StdoutMark *os.File
	StderrMark *os.File
}

// Close closes every pipe end.
func (p *Pipes) Close() {
	for _, f := range []*os.File{p.Stdin, p.Stdout, p.Stderr, p.Control, p.Events, p.StdoutMark, p.StderrMark} {
		if f != nil {
			f.Close()
		}
	}
}

// Proc is a started process.
type Proc interface {
	Pid() int
	// Signal sends sig to the process's whole group; it is a no-op once
	// the process was reaped.
	Signal(sig syscall.Signal) error
	// Done is closed once the process has been reaped.
	Done() <-chan struct{}
	// Status describes how the process ended ("exit status 1",
	// "signal: segmentation fault"); valid once Done is closed.
	Status() string
}
