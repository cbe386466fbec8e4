package sandbox

// Isolation is how strongly a sandbox is kept apart from the host: the
// boundary a process inside must break to reach it (docs/security.md).
type Isolation string

const (
	// IsolationContainer is a Linux container: namespaces, cgroups,
	// seccomp, dropped capabilities; sandbox processes make system calls
	// to the host's kernel. The default.
	IsolationContainer Isolation = "container"
	// IsolationGVisor runs the sandbox on gVisor (runsc): its processes'
	// system calls go to a kernel written in Go running in user space,
	// which itself makes a small, filtered set of host system calls.
	IsolationGVisor Isolation = "gvisor"
)

// Isolations are the known levels, weakest first.
var Isolations = []Isolation{IsolationContainer, IsolationGVisor}

// ParseIsolation checks an isolation level given by a caller or an
// operator; "" is the zero value (the server's default applies).
func ParseIsolation(s string) (Isolation, error) {
	switch Isolation(s) {
	case "", IsolationContainer, IsolationGVisor:
		return Isolation(s), nil
	}
	return "", Errorf(ClassInvalid, "isolation %q: want %q or %q", s, IsolationContainer, IsolationGVisor)
}

// Or returns i, or d when i is unset.
func (i Isolation) Or(d Isolation) Isolation {
	if i == "" {
		return d
	}
	return i
}

// Stronger reports whether i isolates more than o (an unset level counts
// as the container level).
func (i Isolation) Stronger(o Isolation) bool { return rank(i) > rank(o) }

func rank(i Isolation) int {
	if i == IsolationGVisor {
		return 1
	}
	return 0
}
