package agentclient

import "errors"

// ErrOutsideRoot is wrapped by the refusal of a confined request's path
// that leads outside its roots. (Placeholder until confinement lands in
// the agent: see branch dp-confine.)
var ErrOutsideRoot = errors.New("path leads outside the allowed directories")

// Confined returns a client whose requests are confined to roots.
// (Placeholder: the agent does not confine yet.)
func (c *Client) Confined(roots ...string) *Client { return c }
