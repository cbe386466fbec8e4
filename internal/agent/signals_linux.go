package agent

import "golang.org/x/sys/unix"

const (
	sigTERM = unix.SIGTERM
	sigKILL = unix.SIGKILL
)
