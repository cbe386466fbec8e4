package e2b

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/backend/remote"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// DialPort implements backend.PortDialer for the preview proxy: the
// connection it returns is served here by a reverse proxy to the port's
// URL at the provider (HTTP and WebSocket; a port that speaks another
// protocol is not reachable this way). The provider's traffic token goes
// with every request when it issued one; the sandbox's server never sees
// an agentbox credential.
func (b *Backend) DialPort(ctx context.Context, id sandbox.ID, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, sandbox.Errorf(sandbox.ClassInvalid, "port %d out of range", port)
	}
	st, err := b.box(id)
	if err != nil {
		return nil, err
	}
	if st.State != sandbox.StateRunning {
		return nil, sandbox.Errorf(sandbox.ClassConflict, "sandbox %s is %s", id, st.State)
	}
	target, err := url.Parse(b.portURL(st, port))
	if err != nil {
		return nil, fmt.Errorf("preview URL: %w", err)
	}
	rid, traffic := st.RemoteID, st.P.TrafficToken
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = target.Host
			pr.Out.Header.Set("E2b-Sandbox-Id", rid)
			pr.Out.Header.Set("E2b-Sandbox-Port", fmt.Sprint(port))
			pr.Out.Header.Del("X-Access-Token")
			pr.Out.Header.Del("E2b-Traffic-Access-Token")
			if traffic != "" {
				pr.Out.Header.Set("E2b-Traffic-Access-Token", traffic)
			}
		},
		Transport:     b.previewTransport(),
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			b.log.Debug("preview at the provider", "sandbox", id, "port", port, "err", err)
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	return remote.ServeOne(proxy), nil
}

// previewTransport is the transport of previews (made once).
func (b *Backend) previewTransport() http.RoundTripper {
	previewOnce.Do(func() {
		previewRT = &http.Transport{Proxy: http.ProxyFromEnvironment, MaxIdleConnsPerHost: 8, IdleConnTimeout: 30 * time.Second,
			TLSHandshakeTimeout: 10 * time.Second, DisableCompression: true}
	})
	return previewRT
}

var (
	previewOnce sync.Once
	previewRT   http.RoundTripper
)
