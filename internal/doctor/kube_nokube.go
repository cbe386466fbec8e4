//go:build nokube

package doctor

import "context"

// kubeReachable cannot tell: this build has no Kubernetes client.
// `agentbox doctor` hands settings that need one to agentbox-kube, as
// `agentbox serve` does.
func kubeReachable(context.Context, string) error { return errNoKubeClient }
