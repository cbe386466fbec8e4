package daemon

import (
	"context"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"github.com/agentbox/agentbox/internal/broker"
	"github.com/agentbox/agentbox/internal/sandbox"

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

// prepareBroker loads the egress broker's CA (created in the data dir on
// first start, kept so that running sandboxes keep trusting it) and writes
// the CA bundle mounted into sandboxes; it returns the bundle's path.
func (s *server) prepareBroker() (string, error) {
	dir := filepath.Join(s.dataDir, "broker")
	ca, err := broker.LoadCA(dir)
	if err != nil {
		return "", err
	}
	bundle := filepath.Join(dir, "ca-bundle.pem")
	if err := ca.WriteBundle(bundle); err != nil {
		return "", fmt.Errorf("broker CA bundle: %w", err)
	}
	s.brokerCA = ca
	return bundle, nil
}

// startBroker runs the egress broker on the bridge address, once the
// secrets, the audit log and the manager exist.
func (s *server) startBroker() error {
	if s.brokerCA == nil || s.netMgr == nil || s.vault == nil {
		return nil
	}
	cfg := s.cfg
	roots, err := x509.SystemCertPool()
	if err != nil {
		roots = x509.NewCertPool()
	}
	if cfg.NetworkBrokerCAFile != "" {
		pem, err := os.ReadFile(cfg.NetworkBrokerCAFile)
		if err != nil {
			return fmt.Errorf("NETWORK_BROKER_CA_FILE: %w", err)
		}
		if !roots.AppendCertsFromPEM(pem) {
			return fmt.Errorf("NETWORK_BROKER_CA_FILE %s: no PEM certificate in it", cfg.NetworkBrokerCAFile)
		}
	}
	m := s.m
	b := broker.New(broker.Config{Policy: s.netMgr, Secrets: s.vault, CA: s.brokerCA, RootCAs: roots, Audit: s.audit,
		Logger: s.log.With("component", "broker"),
		Owner: func(id sandbox.ID) (string, bool) {
			rec, err := m.Lookup(id)
			if err != nil {
				return "", false
			}
			return rec.Owner, true
		}})
	addr := net.JoinHostPort(s.netMgr.BridgeIP().String(), strconv.Itoa(int(cfg.NetworkBrokerPort)))
	ln, err := net.Listen("tcp4", addr)
	if err != nil {
		return fmt.Errorf("egress broker on %s (NETWORK_BROKER_PORT): %w", addr, err)
	}
	s.netMgr.SetPolicyHook(b.PolicyChanged)
	go func() {
		if err := b.Serve(ln); err != nil {
			s.log.Error("egress broker stopped", "err", err)
		}
	}()
	s.log.Info("egress broker listening", "addr", addr)
	s.push("egress broker", func() error { _ = ln.Close(); return b.Close() })
	return nil
}

// checkRules refuses egress rules that use secrets owner does not have:
// a tenant can only bind its own secrets.
func (s *server) checkRules(ctx context.Context, owner string, n sandbox.Network) error {
	if s.vault == nil || s.brokerCA == nil {
		return sandbox.Invalid("network.rules", "egress rules need the egress broker, which is off on this server (NETWORK_BROKER_PORT)")
	}
	for _, r := range n.Rules {
		for _, name := range broker.SecretRefs(r) {
			if _, err := s.vault.Get(ctx, owner, name); err != nil {
				if sandbox.ClassOf(err) == sandbox.ClassNotFound {
					return sandbox.Invalid("network.rules", "rule for %s uses secret %q, which you do not have", r.Host, name)
				}
				return err
			}
		}
	}
	return nil
}
