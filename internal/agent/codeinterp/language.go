package codeinterp

import (
	"strings"
)

// protocol is how the agent drives an interpreter.
type protocol int

const (
	// protoDriver: an embedded driver speaking NDJSON on fds 3 and 4.
	protoDriver protocol = iota
	// protoBash: commands on stdin, done lines on fd 4.
	protoBash
)

// language describes one supported language.
type language struct {
	name     string   // canonical name, as listed
	binaries []string // executables to look for in PATH, in order
	proto    protocol
	// argv builds the command line from the executable found and the
	// driver bootstrap.
	argv func(bin string) []string
	// env holds variables set when the environment lacks them.
	env map[string]string
	// missing explains what to install when no binary is found.
	missing string
}

var languages = map[string]*language{
	"python": {
		name: "python", binaries: []string{"python3"}, proto: protoDriver,
		argv: func(bin string) []string {
			// -u: unbuffered, so print() reaches the pipe at once.
			return []string{bin, "-u", "-c", pythonBootstrap()}
		},
		// Figures render off-screen; the driver emits them as PNG.
		env:     map[string]string{"MPLBACKEND": "Agg"},
		missing: "python contexts need python3, which is not installed in this sandbox",
	},
	"javascript": {
		name: "javascript", binaries: []string{"node", "nodejs"}, proto: protoDriver,
		argv: func(bin string) []string {
			return []string{bin, "-e", jsBootstrap()}
		},
		missing: "javascript contexts need node, which is not installed in this sandbox",
	},
	"bash": {
		name: "bash", binaries: []string{"bash"}, proto: protoBash,
		argv: func(bin string) []string {
			return []string{bin, "--noprofile", "--norc"}
		},
		missing: "bash contexts need bash, which is not installed in this sandbox",
	},
}

// DefaultLanguage is used when a request names neither a context nor a
// language.
const DefaultLanguage = "python"

// normalizeLanguage maps a requested language onto a supported one (E2B
// names plus a few aliases); empty means python.
func normalizeLanguage(s string) (*language, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	switch s {
	case "", "python3", "py", "ipython":
		s = "python"
	case "js", "node", "nodejs":
		s = "javascript"
	case "sh", "shell":
		s = "bash"
	}
	l, ok := languages[s]
	if !ok {
		return nil, errorf(KindInvalid, "unsupported language %q: want python, javascript or bash", s)
	}
	return l, nil
}

// find looks for the language's interpreter in env's PATH.
func (l *language) find(h Host, env map[string]string) (string, error) {
	for _, b := range l.binaries {
		if p, err := h.LookPath(b, env); err == nil {
			return p, nil
		}
	}
	return "", errorf(KindInvalid, "%s", l.missing)
}
