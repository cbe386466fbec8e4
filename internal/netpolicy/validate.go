package netpolicy

import "github.com/agentbox/agentbox/internal/sandbox"

// Validate checks a sandbox network configuration the way Setup and
// UpdatePolicy will, so callers can refuse a bad request before creating
// anything. Errors have class sandbox.ClassInvalid.
func Validate(n sandbox.Network) error {
	switch n.Mode {
	case sandbox.NetworkNone:
		if len(n.AllowOut)+len(n.DenyOut)+len(n.Rules) > 0 {
			return sandbox.Errorf(sandbox.ClassInvalid, "allow_out, deny_out and rules need network mode egress")
		}
		return nil
	case sandbox.NetworkEgress:
		_, err := parsePolicy(n)
		return err
	}
	return sandbox.Errorf(sandbox.ClassInvalid, "network mode must be none or egress, not %q", n.Mode)
}
