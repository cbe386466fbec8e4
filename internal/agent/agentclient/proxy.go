package agentclient

import (
	"net/http"
	"net/url"
)

// ProxyTarget is what a reverse proxy to the agent needs: its base URL,
// the transport that reaches it (keep-alive, no transparent gzip; it adds
// the endpoint's headers) and the access token it wants.
func (c *Client) ProxyTarget() (base *url.URL, rt http.RoundTripper, token string) {
	return mustParse(c.baseURL), c.http.Transport, c.token
}

// CodeProxyTarget is ProxyTarget of the code interpreter's routes, which
// a provider may serve elsewhere than the envd routes (E2B: port 49999);
// for an agent of this host it is ProxyTarget.
func (c *Client) CodeProxyTarget() (base *url.URL, rt http.RoundTripper, token string) {
	rt = c.http.Transport
	if len(c.codeHeader) > 0 {
		rt = headerTransport{header: c.codeHeader, next: rt}
	}
	return mustParse(c.codeBase), rt, c.token
}

func mustParse(base string) *url.URL {
	u, err := url.Parse(base)
	if err != nil {
		// The base is built by New from an endpoint a backend made, never
		// user input.
		panic("agentclient: bad base URL " + base)
	}
	return u
}
