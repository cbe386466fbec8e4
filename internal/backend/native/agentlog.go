package native

import (
	"context"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// AgentLogPath is the host file the sandbox's agent writes its stdout and
// stderr to (appended across boots; removed with the sandbox). An agentbox
// Kubernetes node serves it as the pod's log.
func (b *Backend) AgentLogPath(ctx context.Context, id sandbox.ID) (string, error) {
	bx, err := b.lookup(id)
	if err != nil {
		return "", err
	}
	return bx.paths.log, nil
}
