package backend

import (
	"fmt"
	"os"
	"path/filepath"
)

// ShimBinaryName is the agent's exec shim (cmd/agentbox-shim), which make
// build puts next to the agent.
const ShimBinaryName = "agentbox-shim"

// ShimBinary returns the path of agentbox-shim next to the agent binary at
// agentPath, or why there is none to use. Backends mount it in sandboxes
// beside the agent and pass it with --shim; without it the agent runs
// commands below its own binary (slower to start, more memory per
// sandbox, same guarantees).
func ShimBinary(agentPath string) (string, error) {
	path := filepath.Join(filepath.Dir(agentPath), ShimBinaryName)
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if !st.Mode().IsRegular() || st.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%s is not an executable file", path)
	}
	return path, nil
}
