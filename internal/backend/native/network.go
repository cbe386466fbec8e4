package native

import (
	"context"
	"fmt"
	"net"
	"strconv"

	"github.com/agentbox/agentbox/internal/netpolicy"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// UpdateNetwork implements backend.NetworkUpdater. Only the policy of an
// egress sandbox can change: a sandbox's network namespace is fixed when it
// boots, so switching between "none" and "egress" is a conflict.
func (b *Backend) UpdateNetwork(ctx context.Context, id sandbox.ID, n sandbox.Network) error {
	bx, err := b.lookup(id)
	if err != nil {
		return err
	}
	bx.mu.Lock()
	defer bx.mu.Unlock()
	cur := bx.rec.Spec.Network.Mode
	if n.Mode == "" {
		n.Mode = cur
	}
	if n.Mode != cur {
		return sandbox.Errorf(sandbox.ClassConflict, "network mode %q cannot change to %q on an existing sandbox", cur, n.Mode)
	}
	if cur != sandbox.NetworkEgress {
		if len(n.AllowOut)+len(n.DenyOut) > 0 {
			return sandbox.Errorf(sandbox.ClassConflict, "sandbox %s has no network (mode %q): there is no egress policy to change", id, cur)
		}
		return nil
	}
	if bx.rec.Stopped {
		return sandbox.Errorf(sandbox.ClassConflict, "sandbox %s is stopped", id)
	}
	if err := b.cfg.Network.UpdatePolicy(ctx, id, n); err != nil {
		return err
	}
	bx.rec.Spec.Network = n
	return b.saveRecord(bx)
}

// DialPort implements backend.PortDialer: it connects to 127.0.0.1:port
// inside the sandbox's network namespace, so a server the sandbox runs is
// reachable without publishing any port on the host, in every network mode.
func (b *Backend) DialPort(ctx context.Context, id sandbox.ID, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, sandbox.Errorf(sandbox.ClassInvalid, "port %d out of range", port)
	}
	bx, err := b.lookup(id)
	if err != nil {
		return nil, err
	}
	bx.mu.Lock()
	pid, stopped, gvisor := bx.pid, bx.rec.Stopped, isGVisor(bx.rec.Spec)
	bx.mu.Unlock()
	if gvisor {
		// Its ports are in gVisor's network stack, not the host's
		// namespace: nothing to dial from here.
		return nil, errGVisor(id, "previews of its ports")
	}
	if stopped || pid == 0 {
		return nil, sandbox.Errorf(sandbox.ClassConflict, "sandbox %s is not running", id)
	}
	conn, err := netpolicy.DialInNetns(ctx, "/proc/"+strconv.Itoa(pid)+"/ns/net", "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return nil, sandbox.Wrap(sandbox.ClassUnavailable, err, fmt.Sprintf("nothing answers on port %d in sandbox %s", port, id))
	}
	return conn, nil
}
