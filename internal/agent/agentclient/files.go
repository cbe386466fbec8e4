package agentclient

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
)

// Download opens the file at path (relative paths resolve against user's
// home) and returns its content as a stream plus its size (-1 when
// unknown). The caller must close the reader. Nothing is buffered: bytes
// flow from the agent's disk as they are read.
func (c *Client) Download(ctx context.Context, path, user string) (io.ReadCloser, int64, error) {
	resp, err := c.do(ctx, http.MethodGet, "/files", fileQuery(path, user), user, nil, "")
	if err != nil {
		return nil, 0, err
	}
	return resp.Body, resp.ContentLength, nil
}

// Upload streams r into the file at path (parents are created, an existing
// file is replaced atomically) owned by user, and describes the new file.
// The body is sent with chunked encoding as it is read, never buffered
// whole; size limits are the caller's business.
func (c *Client) Upload(ctx context.Context, path, user string, r io.Reader) (EntryInfo, error) {
	body := &countingReader{r: r}
	resp, err := c.do(ctx, http.MethodPost, "/files", fileQuery(path, user), user, body, "application/octet-stream")
	if err != nil {
		return EntryInfo{}, err
	}
	defer resp.Body.Close()
	var files []struct {
		Name string `json:"name"`
		Type string `json:"type"`
		Path string `json:"path"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&files); err != nil || len(files) == 0 {
		return EntryInfo{}, mapError("upload", fmt.Errorf("unexpected response: %v", err))
	}
	return EntryInfo{Name: files[0].Name, Path: files[0].Path, Type: FileTypeFile, Size: body.n}, nil
}

func fileQuery(path, user string) url.Values {
	q := url.Values{"path": {path}}
	if user != "" {
		q.Set("username", user)
	}
	return q
}

// countingReader counts the bytes read through it. It deliberately hides
// the concrete type of r, so the transport streams instead of trying to
// learn a length.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
