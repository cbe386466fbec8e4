package native

import (
	"context"
	"testing"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/testutil"
)

// BenchmarkFirstCell measures a sandbox's first run_code, with and
// without a warm code context (the agentbox.code.* labels). Only the
// first cell is timed; the create and the readiness wait are not.
func BenchmarkFirstCell(b *testing.B) {
	testutil.RequireRoot(b)
	warm, _ := sandbox.ServiceOf(sandbox.ImageConfig{Labels: map[string]string{
		sandbox.LabelCodeContext: "python", sandbox.LabelCodeWarmup: "import json"}})
	for _, bc := range []struct {
		name string
		svc  *sandbox.Service
	}{{"cold", nil}, {"warm", warm}} {
		b.Run(bc.name, func(b *testing.B) {
			be := newTestBackend(b, testutil.ShortTempDir(b))
			ctx := context.Background()
			for b.Loop() {
				b.StopTimer()
				info, err := be.Create(ctx, sandbox.Spec{ID: sandbox.NewID(), Template: sandbox.HostTemplate(), Service: bc.svc})
				if err != nil {
					b.Fatal(err)
				}
				c := agentclient.New(agentclient.Endpoint{Network: info.Agent.Network, Address: info.Agent.Address}, "")
				if _, err := c.WaitService(ctx, waitBound); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				ex, err := c.RunCode(ctx, agentclient.ExecuteRequest{Code: "import json; print(1)"})
				b.StopTimer()
				if err != nil || ex.Error != nil {
					b.Fatal(err, ex.Error)
				}
				c.Close()
				_ = be.Destroy(ctx, info.ID)
				b.StartTimer()
			}
		})
	}
}
