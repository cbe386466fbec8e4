package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// BootstrapRequest asks the server to bootstrap a Debian template from its
// own apt sources (operator only).
type BootstrapRequest struct {
	// Image is "debian:SUITE" or "debian:VERSION".
	Image string `json:"image"`
	// Name is the template's NAME[:TAG] ("" = the image reference).
	Name string `json:"name,omitempty"`
	// Include are Debian packages installed at bootstrap time.
	Include []string `json:"include,omitempty"`
	// Variant is mmdebstrap's package set ("" = minbase).
	Variant string `json:"variant,omitempty"`
}

// BootstrapEvent is one progress event of a bootstrap: "log" (a line of
// mmdebstrap's output), the import's "downloading"/"unpacking"/"cached",
// then "done" (Template set) or "error" (Error set).
type BootstrapEvent struct {
	Status   string          `json:"status"`
	Message  string          `json:"message,omitempty"`
	Layer    string          `json:"layer,omitempty"`
	Current  int64           `json:"current,omitempty"`
	Total    int64           `json:"total,omitempty"`
	Template json.RawMessage `json:"template,omitempty"`
	Error    string          `json:"error,omitempty"`
}

// maxBootstrapEvent bounds one event line (the server cuts log lines at
// 4 KiB; the final event carries a template record).
const maxBootstrapEvent = 4 << 20

// BootstrapTemplate bootstraps req.Image on the server and stores it as a
// template, calling progress (when non-nil) for every event. It returns
// the stored template's record as the server sent it. Cancelling ctx
// cancels the bootstrap.
func (c *Client) BootstrapTemplate(ctx context.Context, req BootstrapRequest, progress func(BootstrapEvent)) (json.RawMessage, error) {
	op := "bootstrap " + req.Image
	b, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("%s: encode request: %w", op, err)
	}
	hreq, err := c.newRequest(ctx, http.MethodPost, "/v1/templates/bootstraps", nil, bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "application/x-ndjson")
	resp, err := c.send(op, hreq)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), maxBootstrapEvent)
	for sc.Scan() {
		var ev BootstrapEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("%s: bad event from the server: %w", op, err)
		}
		if progress != nil {
			progress(ev)
		}
		switch ev.Status {
		case "done":
			if ev.Template == nil {
				continue // a layer's progress from an older server
			}
			return ev.Template, nil
		case "error":
			return nil, fmt.Errorf("%s: %s", op, ev.Error)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("%s: %w", op, ctx.Err())
	}
	return nil, fmt.Errorf("%s: %w", op, errors.Join(io.ErrUnexpectedEOF, errors.New("the server ended the stream before the bootstrap finished")))
}
