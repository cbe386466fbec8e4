package native

import (
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/agentbox/agentbox/internal/seccompprofile"
)

// seccompProfile is agentbox's profile (shared with the other backends)
// evaluated for the given capability set.
func seccompProfile(capabilities []string) (*specs.LinuxSeccomp, error) {
	return seccompprofile.OCI(capabilities)
}
