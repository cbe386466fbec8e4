package netpolicy

import (
	"testing"

	"github.com/agentbox/agentbox/internal/testutil"
)

// TestMain fails the package's run when a test leaves a goroutine behind.
func TestMain(m *testing.M) { testutil.VerifyMain(m) }
