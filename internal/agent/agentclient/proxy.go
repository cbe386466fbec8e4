package agentclient

import (
	"net/http"
	"net/url"
)

// ProxyTarget is what a reverse proxy to the agent needs: its base URL,
// the transport that reaches it (keep-alive, no transparent gzip) and the
// access token it wants.
func (c *Client) ProxyTarget() (base *url.URL, rt http.RoundTripper, token string) {
	u, err := url.Parse(c.baseURL)
	if err != nil {
		// baseURL is built by New from an endpoint, never user input.
		panic("agentclient: bad base URL " + c.baseURL)
	}
	return u, c.tr, c.token
}
