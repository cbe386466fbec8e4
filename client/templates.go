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
	"net/url"
	"time"
)

// Template is a template of the server's store: what a sandbox's root
// filesystem is made of.
type Template struct {
	Name    string          `json:"name"`
	Tag     string          `json:"tag"`
	Kind    string          `json:"kind"` // "host", "dir", "image"
	Digest  string          `json:"digest,omitempty"`
	Source  string          `json:"source,omitempty"`
	Layers  []TemplateLayer `json:"layers"`
	Size    int64           `json:"size"` // unpacked bytes of all layers
	Created time.Time       `json:"created"`
	InUse   int             `json:"in_use"` // live sandboxes using it
	Config  ImageConfig     `json:"config"`
}

// TemplateLayer is one layer of a template.
type TemplateLayer struct {
	DiffID string `json:"diff_id"`
	Size   int64  `json:"size"`
}

// ImageConfig is what a template's image says about running it.
type ImageConfig struct {
	Env        []string          `json:"env,omitempty"`
	WorkingDir string            `json:"working_dir,omitempty"`
	User       string            `json:"user,omitempty"`
	Entrypoint []string          `json:"entrypoint,omitempty"`
	Cmd        []string          `json:"cmd,omitempty"`
	Ports      []string          `json:"ports,omitempty"`
	Labels     map[string]string `json:"labels,omitempty"`
}

// TemplateProgress reports a pull or an import under way.
type TemplateProgress struct {
	Layer   string `json:"layer,omitempty"`
	Status  string `json:"status"` // "downloading", "unpacking", "cached", "done"
	Current int64  `json:"current,omitempty"`
	Total   int64  `json:"total,omitempty"`
}

// templatePath returns "/v1/templates/<name><suffix>", escaping name as
// one path segment ("library/python:3.12").
func templatePath(name, suffix string) string {
	return "/v1/templates/" + url.PathEscape(name) + suffix
}

// Templates lists the server's templates.
func (c *Client) Templates(ctx context.Context) ([]Template, error) {
	l, err := c.ListTemplates(ctx)
	if err != nil {
		return nil, err
	}
	return l.Templates, nil
}

// TemplateList is GET /v1/templates: the stored templates, and the
// built-in ones' states (the server builds them at start).
type TemplateList struct {
	Templates []Template        `json:"templates"`
	Builtin   []BuiltinTemplate `json:"builtin,omitempty"`
}

// BuiltinTemplate is a built-in template's state (docs/templates.md).
type BuiltinTemplate struct {
	Name string `json:"name"`
	// State is "ready", "building", "failed" or "not_built".
	State string `json:"state"`
	// Progress is the build's last word ("step 3/7: RUN ...").
	Progress string `json:"progress,omitempty"`
	// Since is when the build started (building) or ended (failed).
	Since time.Time `json:"since,omitzero"`
	// ElapsedMS is how long it has been building, EstimateMS how long a
	// build is expected to take.
	ElapsedMS  int64 `json:"elapsed_ms,omitempty"`
	EstimateMS int64 `json:"estimate_ms,omitempty"`
	// Error says why the build failed.
	Error string `json:"error,omitempty"`
	// Command builds it by hand.
	Command string `json:"command,omitempty"`
}

// ListTemplates returns the stored templates and the built-in ones' states.
func (c *Client) ListTemplates(ctx context.Context) (*TemplateList, error) {
	var out TemplateList
	if err := c.doJSON(ctx, "list templates", http.MethodGet, "/v1/templates", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Template returns the template name (NAME or NAME:TAG), or ErrNotFound.
func (c *Client) Template(ctx context.Context, name string) (*Template, error) {
	var t Template
	if err := c.doJSON(ctx, "get template "+name, http.MethodGet, templatePath(name, ""), nil, nil, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// DeleteTemplate deletes template name. It fails with ErrConflict while a
// sandbox uses it, ErrPermissionDenied for a caller who is not the
// server's operator.
func (c *Client) DeleteTemplate(ctx context.Context, name string) error {
	return c.doJSON(ctx, "delete template "+name, http.MethodDelete, templatePath(name, ""), nil, nil, nil)
}

// PullRequest names an image to pull into a template.
type PullRequest struct {
	Image    string `json:"image"`              // "python:3.12-slim", "ghcr.io/org/app@sha256:..."
	Name     string `json:"name,omitempty"`     // NAME[:TAG]; default the image reference
	Platform string `json:"platform,omitempty"` // os/arch[/variant]; default the server's
}

// PullTemplate pulls an image from a registry into a template (the
// server's operator only). progress, when non-nil, is called with each
// progress report as it arrives.
func (c *Client) PullTemplate(ctx context.Context, req PullRequest, progress func(TemplateProgress)) (*Template, error) {
	op := "pull " + req.Image
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	r, err := c.newRequest(ctx, http.MethodPost, "/v1/templates/pulls", nil, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	r.Header.Set("Content-Type", "application/json")
	return c.templateStream(op, r, progress)
}

// ImportTemplate imports the tarball r yields (a docker save tarball, an
// OCI image archive or a root filesystem tarball; size bytes, -1 when
// unknown) as template name, streaming it (the client never holds it).
// sent, when non-nil, is called with the bytes sent so far; progress with
// the server's reports once the upload is in. r is not closed.
func (c *Client) ImportTemplate(ctx context.Context, name string, r io.Reader, size int64, sent func(int64), progress func(TemplateProgress)) (*Template, error) {
	op := "import template " + name
	body := &countingReader{r: r, progress: sent}
	req, err := c.newRequest(ctx, http.MethodPost, "/v1/templates/imports", url.Values{"name": {name}}, body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	req.ContentLength = -1
	if size >= 0 {
		req.ContentLength = size
		if size == 0 {
			req.Body = http.NoBody
		}
	}
	req.Header.Set("Content-Type", "application/x-tar")
	return c.templateStream(op, req, progress)
}

// templateStream sends a pull or an import asking for the NDJSON form,
// reports progress events and returns the final template, or the error
// event's *Error.
func (c *Client) templateStream(op string, req *http.Request, progress func(TemplateProgress)) (*Template, error) {
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err := c.send(op, req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusCreated {
		// A server that answered in one piece.
		var t Template
		if err := json.NewDecoder(resp.Body).Decode(&t); err != nil {
			return nil, fmt.Errorf("%s: decode response: %w", op, err)
		}
		return &t, nil
	}
	rd := bufio.NewReaderSize(resp.Body, 64<<10)
	for {
		line, err := readLine(rd, 1<<20)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		var ev struct {
			Type string `json:"type"`
			TemplateProgress
			Template *Template `json:"template"`
			Error    *Error    `json:"error"`
		}
		if err := json.Unmarshal(line, &ev); err != nil {
			return nil, fmt.Errorf("%s: decode event: %w", op, err)
		}
		switch ev.Type {
		case "progress":
			if progress != nil {
				progress(ev.TemplateProgress)
			}
		case "done":
			if ev.Template == nil {
				return nil, fmt.Errorf("%s: done event without a template", op)
			}
			return ev.Template, nil
		case "error":
			if ev.Error == nil {
				return nil, fmt.Errorf("%s: error event without an error", op)
			}
			ev.Error.Status = statusOfCode(ev.Error.Code)
			return nil, ev.Error
		}
	}
}

// readLine reads one line of at most limit bytes, without its newline.
func readLine(rd *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	for {
		part, isPrefix, err := rd.ReadLine()
		if err != nil {
			return nil, err
		}
		line = append(line, part...)
		if len(line) > limit {
			return nil, fmt.Errorf("event line over %d bytes", limit)
		}
		if !isPrefix {
			if len(line) == 0 {
				continue
			}
			return line, nil
		}
	}
}

// ExportTemplate opens template name as a tarball (format "docker" or
// "oci"; "" is docker). The caller must close the stream; a transfer cut
// short reads as an error, never as a clean end.
func (c *Client) ExportTemplate(ctx context.Context, name, format string) (io.ReadCloser, error) {
	op := "export template " + name
	q := url.Values{}
	if format != "" {
		q.Set("format", format)
	}
	req, err := c.newRequest(ctx, http.MethodGet, templatePath(name, "/export"), q, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	req.Header.Set("Accept", "application/x-tar")
	resp, err := c.send(op, req) //nolint:bodyclose // the body is the stream handed to the caller, who closes it
	if err != nil {
		return nil, err
	}
	return &opReader{rc: resp.Body, op: op}, nil
}

// statusOfCode is the HTTP status the server maps an error code to, for
// errors that arrive inside a stream.
func statusOfCode(code string) int {
	for _, st := range []int{400, 401, 403, 404, 409, 413, 429, 503, 504, 507} {
		if codeForStatus(st) == code {
			return st
		}
	}
	return http.StatusInternalServerError
}
