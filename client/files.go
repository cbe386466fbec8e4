package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
)

// Paths inside a sandbox may be absolute or relative to the sandbox
// user's home directory.

// Upload writes the bytes of r to path in sandbox id, streaming them (the
// client never holds the whole file). size is the number of bytes r will
// yield, or -1 if unknown (the body is then sent chunked). progress, when
// non-nil, is called with the running total of bytes read from r, from
// the goroutine that sends the body (not necessarily the caller's). Parent directories are created and the file is
// replaced atomically. r is not closed.
func (c *Client) Upload(ctx context.Context, id, path string, r io.Reader, size int64, progress func(n int64)) (*Entry, error) {
	op := fmt.Sprintf("upload %s to sandbox %s", path, id)
	// Hide any Close method: net/http closes a request body that has one,
	// and r belongs to the caller.
	body := &countingReader{r: r, progress: progress}
	req, err := c.newRequest(ctx, http.MethodPut, sandboxPath(id, "/files"), pathQuery(path), body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	req.ContentLength = -1
	if size >= 0 {
		req.ContentLength = size
		if size == 0 {
			// net/http treats a zero ContentLength with a non-nil body as
			// "unknown"; an empty file has a known length.
			req.Body = http.NoBody
		}
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("Accept", "application/json")
	resp, err := c.send(op, req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var e Entry
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		return nil, fmt.Errorf("%s: decode response: %w", op, err)
	}
	return &e, nil
}

// countingReader reports how many bytes went through it.
type countingReader struct {
	r        io.Reader
	n        int64
	progress func(int64)
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 {
		c.n += int64(n)
		if c.progress != nil {
			c.progress(c.n)
		}
	}
	return n, err
}

// Download opens path in sandbox id for reading. It returns the file's
// bytes as a stream, which the caller must close, and its size (-1 when
// the server did not say). Cancelling ctx aborts the stream.
func (c *Client) Download(ctx context.Context, id, path string) (io.ReadCloser, int64, error) {
	op := fmt.Sprintf("download %s from sandbox %s", path, id)
	req, err := c.newRequest(ctx, http.MethodGet, sandboxPath(id, "/files"), pathQuery(path), nil)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", op, err)
	}
	req.Header.Set("Accept", "application/octet-stream")
	resp, err := c.send(op, req) //nolint:bodyclose // the body is the stream handed to the caller, who closes it
	if err != nil {
		return nil, 0, err
	}
	return &opReader{rc: resp.Body, op: op}, resp.ContentLength, nil
}

// opReader wraps read errors (a dropped connection mid-file) with the
// operation, leaving io.EOF alone.
type opReader struct {
	rc io.ReadCloser
	op string
}

func (r *opReader) Read(p []byte) (int, error) {
	n, err := r.rc.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		err = fmt.Errorf("%s: %w", r.op, err)
	}
	return n, err
}

func (r *opReader) Close() error { return r.rc.Close() }

// Stat returns the entry at path in sandbox id, or ErrNotFound.
func (c *Client) Stat(ctx context.Context, id, path string) (*Entry, error) {
	var e Entry
	op := fmt.Sprintf("stat %s in sandbox %s", path, id)
	if err := c.doJSON(ctx, op, http.MethodGet, sandboxPath(id, "/files/stat"), pathQuery(path), nil, &e); err != nil {
		return nil, err
	}
	return &e, nil
}

// ListFiles returns the entries below directory path in sandbox id, down
// to depth levels (1..32; zero means 1).
func (c *Client) ListFiles(ctx context.Context, id, path string, depth int) ([]Entry, error) {
	q := pathQuery(path)
	if depth > 0 {
		q.Set("depth", strconv.Itoa(depth))
	}
	var out struct {
		Entries []Entry `json:"entries"`
	}
	op := fmt.Sprintf("list %s in sandbox %s", path, id)
	if err := c.doJSON(ctx, op, http.MethodGet, sandboxPath(id, "/files/list"), q, nil, &out); err != nil {
		return nil, err
	}
	return out.Entries, nil
}

// MakeDir creates directory path and its parents in sandbox id. It fails
// with ErrConflict when path exists and is not a directory.
func (c *Client) MakeDir(ctx context.Context, id, path string) (*Entry, error) {
	body := struct {
		Path string `json:"path"`
	}{path}
	var e Entry
	op := fmt.Sprintf("mkdir %s in sandbox %s", path, id)
	if err := c.doJSON(ctx, op, http.MethodPost, sandboxPath(id, "/files/mkdir"), nil, body, &e); err != nil {
		return nil, err
	}
	return &e, nil
}

// Move renames source to destination in sandbox id and returns the moved
// entry.
func (c *Client) Move(ctx context.Context, id, source, destination string) (*Entry, error) {
	body := struct {
		Source      string `json:"source"`
		Destination string `json:"destination"`
	}{source, destination}
	var e Entry
	op := fmt.Sprintf("move %s to %s in sandbox %s", source, destination, id)
	if err := c.doJSON(ctx, op, http.MethodPost, sandboxPath(id, "/files/move"), nil, body, &e); err != nil {
		return nil, err
	}
	return &e, nil
}

// Remove deletes the file or directory tree at path in sandbox id.
func (c *Client) Remove(ctx context.Context, id, path string) error {
	op := fmt.Sprintf("remove %s in sandbox %s", path, id)
	return c.doJSON(ctx, op, http.MethodDelete, sandboxPath(id, "/files"), pathQuery(path), nil, nil)
}

func pathQuery(path string) url.Values { return url.Values{"path": {path}} }
