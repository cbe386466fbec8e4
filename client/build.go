package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
)

// BuildRequest describes a Dockerfile build.
type BuildRequest struct {
	Tags       []string          `json:"tags,omitempty"`       // NAME[:TAG] of the result
	Dockerfile string            `json:"dockerfile,omitempty"` // path in the context; default "Dockerfile"
	BuildArgs  map[string]string `json:"build_args,omitempty"`
	Target     string            `json:"target,omitempty"`
	NoCache    bool              `json:"no_cache,omitempty"`
	// Secrets are RUN --mount=type=secret values by id. They travel in
	// the request body, never in a header or the URL, and reach no layer.
	Secrets map[string][]byte `json:"secrets,omitempty"`
}

// BuildEvent is one event of a build: "step", "cached", "running",
// "output", "result", "warning", then "done" (Template set) or "error".
type BuildEvent struct {
	Type        string    `json:"type"`
	Step        int       `json:"step,omitempty"`
	Steps       int       `json:"steps,omitempty"`
	Stage       string    `json:"stage,omitempty"`
	Instruction string    `json:"instruction,omitempty"`
	Line        int       `json:"line,omitempty"`
	Sandbox     string    `json:"sandbox,omitempty"`
	Output      string    `json:"output,omitempty"`
	ID          string    `json:"id,omitempty"`
	DurationMS  int64     `json:"duration_ms,omitempty"`
	Message     string    `json:"message,omitempty"`
	Digest      string    `json:"digest,omitempty"`
	Tags        []string  `json:"tags,omitempty"`
	Template    *Template `json:"template,omitempty"`
	Error       *Error    `json:"error,omitempty"`
}

// BuildTemplate builds a Dockerfile on the server (its operator only).
// buildContext yields the build context as a tar stream (it is streamed,
// never held; not closed). events, when non-nil, receives every event as
// it arrives. It returns the built template, or the build's error (an
// *Error; a Dockerfile error names its line in the message).
func (c *Client) BuildTemplate(ctx context.Context, req BuildRequest, buildContext io.Reader, events func(BuildEvent)) (*Template, error) {
	const op = "build template"
	opts, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		pw.CloseWithError(writeBuildBody(mw, opts, buildContext))
	}()
	defer pr.Close()
	r, err := c.newRequest(ctx, http.MethodPost, "/v1/templates/builds", nil, pr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	r.Header.Set("Content-Type", mw.FormDataContentType())
	r.Header.Set("Accept", "application/x-ndjson")
	resp, err := c.send(op, r)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	rd := bufio.NewReaderSize(resp.Body, 64<<10)
	for {
		line, err := readLine(rd, 4<<20)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		var ev BuildEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			return nil, fmt.Errorf("%s: decode event: %w", op, err)
		}
		if events != nil {
			events(ev)
		}
		switch ev.Type {
		case "done":
			if ev.Template == nil {
				return nil, fmt.Errorf("%s: done event without a template", op)
			}
			return ev.Template, nil
		case "error":
			if ev.Error == nil {
				return nil, fmt.Errorf("%s: %s", op, ev.Message)
			}
			ev.Error.Status = statusOfCode(ev.Error.Code)
			return nil, ev.Error
		}
	}
}

// writeBuildBody writes the multipart body: "options" (JSON), then
// "context" (the tar stream).
func writeBuildBody(mw *multipart.Writer, opts []byte, buildContext io.Reader) error {
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", `form-data; name="options"`)
	h.Set("Content-Type", "application/json")
	p, err := mw.CreatePart(h)
	if err != nil {
		return err
	}
	if _, err := p.Write(opts); err != nil {
		return err
	}
	h = textproto.MIMEHeader{}
	h.Set("Content-Disposition", `form-data; name="context"; filename="context.tar"`)
	h.Set("Content-Type", "application/x-tar")
	if p, err = mw.CreatePart(h); err != nil {
		return err
	}
	if _, err := io.Copy(p, buildContext); err != nil {
		return err
	}
	return mw.Close()
}
