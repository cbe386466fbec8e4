package fake

import (
	"context"
	"os"

	"github.com/agentbox/agentbox/internal/backend"
	"github.com/agentbox/agentbox/internal/sandbox"
)

var _ backend.Recycler = (*Backend)(nil)

// Recycle implements backend.Recycler: every process of the sandbox is
// killed, its work directory (its files) emptied, and a new agent started
// with req.AccessToken and the spec's env, so nothing of the previous
// user's state survives. A failure leaves the sandbox stopped.
func (b *Backend) Recycle(ctx context.Context, id sandbox.ID, req backend.RecycleRequest) error {
	b.count("recycle")
	if req.AccessToken == "" {
		return sandbox.Errorf(sandbox.ClassInvalid, "recycle: a new access token is required")
	}
	bx, err := b.get(id)
	if err != nil {
		return err
	}
	if req.Network.Mode == "" {
		req.Network.Mode = sandbox.NetworkNone
	}
	b.mu.Lock()
	mode := bx.info.Spec.Network.Mode
	b.mu.Unlock()
	if mode == "" {
		mode = sandbox.NetworkNone
	}
	if req.Network.Mode != mode {
		return sandbox.Errorf(sandbox.ClassConflict, "recycle cannot change the network mode (%s to %s)", mode, req.Network.Mode)
	}
	b.kill(bx)
	if err := os.RemoveAll(b.RootDir(id)); err != nil {
		return err
	}
	b.mu.Lock()
	bx.info.Spec.AccessToken = req.AccessToken
	bx.info.Spec.Network = req.Network
	b.mu.Unlock()
	return b.boot(ctx, bx)
}
