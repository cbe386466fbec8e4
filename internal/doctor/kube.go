//go:build !nokube

package doctor

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"

	"github.com/agentbox/agentbox/internal/backend/kube"
)

// kubeReachable asks the API server of kubeconfig ("" = in-cluster) for its
// version, with the configuration the Kubernetes backend connects with.
func kubeReachable(ctx context.Context, kubeconfig string) error {
	rc, err := kube.RESTConfig(kubeconfig)
	if err != nil {
		return err
	}
	rc = rest.CopyConfig(rc)
	rc.Timeout = probeTimeout
	if d, ok := ctx.Deadline(); ok {
		rc.Timeout = time.Until(d)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(rc)
	if err != nil {
		return err
	}
	if _, err := dc.ServerVersion(); err != nil {
		return fmt.Errorf("%s: %w", rc.Host, err)
	}
	return nil
}
