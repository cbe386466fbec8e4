package daemon

import (
	"fmt"
	"log/slog"

	"github.com/agentbox/agentbox/internal/secrets"
	"github.com/agentbox/agentbox/internal/store"
)

// openVault opens the tenants' secrets in the state store's documents,
// encrypted with the operator's key or, on a store of this host alone, one
// generated into the data dir. A shared store without an operator key
// refuses to start: replicas with keys of their own could not read each
// other's secrets.
func openVault(cfg secrets.Settings, st store.Store, dataDir string, log *slog.Logger) (*secrets.Vault, error) {
	docs, ok := st.(store.Docs)
	if !ok {
		return nil, nil
	}
	key, err := secrets.LoadKey(cfg, dataDir, shared(st), log.With("component", "secrets"))
	if err != nil {
		return nil, fmt.Errorf("secrets: %w", err)
	}
	return secrets.New(docs, key, cfg.SecretsMaxPerUser)
}
