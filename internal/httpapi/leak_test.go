package httpapi

import (
	"testing"

	"github.com/agentbox/agentbox/internal/testutil"
)

// TestMain fails the package's run when a test leaves a goroutine behind
// (the fuzz targets' shared server is shut down first).
func TestMain(m *testing.M) { testutil.VerifyMainAfter(m, func() { fuzzEnd() }) }
