package native

import (
	"context"
	"fmt"
	"os"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// OpenAgentLog opens the file the sandbox's agent writes its stdout and
// stderr to (appended across boots; removed with the sandbox), for
// reading. An agentbox Kubernetes node serves it as the pod's log.
//
// The log lives on the sandbox's disk, which is mounted only in the
// sandbox's own namespace and reached through the daemon's descriptor of
// it (mountns.go): it is opened under the box's lock, so the descriptor
// cannot be closed (and its number reused) in between. The open file
// stays readable until the disk is revoked at destroy.
func (b *Backend) OpenAgentLog(ctx context.Context, id sandbox.ID) (*os.File, error) {
	bx, err := b.lookup(id)
	if err != nil {
		return nil, err
	}
	bx.mu.Lock()
	defer bx.mu.Unlock()
	if !bx.diskMounted() {
		return nil, sandbox.Errorf(sandbox.ClassConflict, "sandbox %s is not running: its disk is not mounted", id)
	}
	f, err := os.Open(bx.diskPath("agent.log"))
	if err != nil {
		return nil, fmt.Errorf("open the agent log of %s: %w", id, err)
	}
	return f, nil
}
