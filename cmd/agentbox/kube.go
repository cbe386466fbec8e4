package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/agentbox/agentbox/internal/backend/native"
)

// kubeBinary is the build of this command with the Kubernetes backend and
// `agentbox node` (make build puts it next to bin/agentbox, which is built
// without them: see internal/daemon, kube_nokube.go).
const kubeBinary = "agentbox-kube"

// execKube replaces this process with kubeBinary from this binary's
// directory, with the same arguments and environment. It returns only when
// that fails.
func execKube() error {
	self, err := native.Executable()
	if err != nil {
		return fmt.Errorf("find %s: %w", kubeBinary, err)
	}
	path := filepath.Join(filepath.Dir(self), kubeBinary)
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("these settings need Kubernetes support, which this binary is built without; %s was not found next to it (make build makes it): %w", kubeBinary, err)
	}
	// The full binary seals itself as this one would have; markers of a
	// sealed re-exec of this binary must not reach it.
	env := make([]string, 0, len(os.Environ()))
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "_AGENTBOX_") {
			env = append(env, kv)
		}
	}
	argv := append([]string{path}, os.Args[1:]...)
	return fmt.Errorf("start %s: %w", path, syscall.Exec(path, argv, env)) //nolint:gosec // G702: path is agentbox-kube next to this binary, argv this process's own
}
