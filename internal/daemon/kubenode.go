//go:build !nokube

package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/agentbox/agentbox/internal/backend/native"
	"github.com/agentbox/agentbox/internal/httpapi"
	"github.com/agentbox/agentbox/internal/kubenode"
)

// RunNode runs `agentbox node` until ctx ends: the native backend with
// sandbox networking and the template store, as `agentbox serve` has them,
// under a Kubernetes node (internal/kubenode) instead of the HTTP API.
// On the way out every pod's sandbox is destroyed and the Node is marked
// not ready.
func RunNode(ctx context.Context, opts Options) error {
	cfg := opts.Config
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	kn := cfg.KubeNode
	if kn.Address == "" || kn.TLSCert == "" || kn.TLSKey == "" || kn.ClientCA == "" {
		return errors.New("agentbox node needs KUBE_NODE_ADDRESS, KUBE_NODE_TLS_CERT, KUBE_NODE_TLS_KEY and KUBE_NODE_CLIENT_CA (docs/kubernetes.md)")
	}
	name := string(kn.Name)
	if name == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			return errors.New("agentbox node: no host name; set KUBE_NODE_NAME")
		}
		name = "agentbox-" + host
	}
	var restCfg *rest.Config
	var err error
	if kn.Kubeconfig != "" {
		restCfg, err = clientcmd.BuildConfigFromFlags("", kn.Kubeconfig)
	} else {
		restCfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return fmt.Errorf("agentbox node: kubeconfig: %w", err)
	}
	if cfg.Network == "off" {
		return errors.New("agentbox node needs sandbox networking (NETWORK): a pod's IP is its sandbox's address")
	}

	if err := os.MkdirAll(cfg.DataDir, 0o711); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return err
	}
	unlock, err := lockDataDir(dataDir)
	if err != nil {
		return err
	}
	defer unlock()
	agent, err := FindAgent(cfg.AgentPath)
	if err != nil {
		return err
	}
	netMgr, _, err := startNetwork(ctx, cfg, dataDir, log)
	if err != nil {
		return err
	}
	if netMgr == nil {
		return errors.New("agentbox node: sandbox networking is unavailable on this host (see NETWORK)")
	}
	nb, err := native.New(native.Config{Root: filepath.Join(dataDir, "native"), AgentPath: agent, Defaults: cfg.Resources, Logger: log,
		PrivateDirs: []string{dataDir}, DiskReserve: int64(cfg.DiskReserve), DiskOvercommit: float64(cfg.DiskOvercommit),
		NofileSoft: cfg.NofileSoft, NofileHard: cfg.NofileHard, IDBase: cfg.IDBase, IDRanges: cfg.IDRanges,
		Network: netMgr, LeaveCgroupMounts: !cfg.CgroupFavorDynmods})
	if err != nil {
		netMgr.Close(false)
		return err
	}
	defer func() {
		if err := nb.Close(); err != nil {
			log.Error("close backend", "err", err)
		}
		if err := netMgr.Close(true); err != nil {
			log.Error("close sandbox networking", "err", err)
		}
	}()
	// Sandboxes a previous run left (it crashed): their pods are created
	// again by the node, so the old ones go.
	left, err := nb.Recover(ctx)
	if err != nil {
		return fmt.Errorf("agentbox node: recover: %w", err)
	}
	for _, info := range left {
		if err := nb.Destroy(ctx, info.ID); err != nil {
			log.Warn("destroy a sandbox of an earlier run", "sandbox", info.ID, "err", err)
		}
	}
	if err := netMgr.Reconcile(ctx, nil); err != nil {
		log.Warn("reconcile sandbox networking", "err", err)
	}

	templates, err := openTemplateStore(ctx, cfg, templateDir(cfg, dataDir), nil, log)
	if err != nil {
		return err
	}
	defer templates.Close()
	resolver := newAutoPull(templates, cfg.TemplateAutoPull, httpapi.NewTemplateGate(cfg.TemplateMaxPulls), log)

	n, err := kubenode.Start(ctx, kubenode.Config{
		NodeName: name, REST: restCfg, Backend: nb, Network: netMgr, Templates: resolver,
		Defaults: cfg.Resources, MaxResources: cfg.MaxResources,
		VolumeDir: filepath.Join(dataDir, "node", "volumes"), LogDir: filepath.Join(dataDir, "node", "logs"),
		Address: string(kn.Address), Port: kn.Port, TLSCertFile: kn.TLSCert, TLSKeyFile: kn.TLSKey, ClientCAFile: kn.ClientCA,
		Logger: log,
	})
	if err != nil {
		return err
	}
	<-ctx.Done()
	log.Info("agentbox node stopping: destroying its pods' sandboxes", "node", name)
	stopCtx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return n.Stop(stopCtx)
}
