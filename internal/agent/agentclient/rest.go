package agentclient

import (
	"context"
	"io"
	"net/http"
	"net/url"
)

// do sends a REST request and returns the response when its status is
// 2xx; any other status becomes a classified error (and the body is
// closed).
func (c *Client) do(ctx context.Context, method, path string, q url.Values, user string, body io.Reader, contentType string) (*http.Response, error) {
	u := c.baseURL + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, mapError(path, err)
	}
	c.setHeaders(req.Header, user)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, mapError(method+" "+path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer resp.Body.Close()
		return nil, statusError(method+" "+path, resp)
	}
	return resp, nil
}
