package daytona

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// api is a client of the provider's control plane (/api/sandbox...) and
// of its toolbox (the in-sandbox data plane), both with the operator's
// key as a bearer token.
type api struct {
	base     string // control plane base URL (DAYTONA_SERVER_URL, with its /api), no trailing slash
	key      string // the operator's key: never in an error or log
	target   string // DAYTONA_TARGET, "" for the provider's default
	provider string
	http     *http.Client
}

// ErrProviderDown is wrapped by the errors of calls the provider did not
// answer (connection refused, a timeout, a 5xx).
var ErrProviderDown = errors.New("provider unavailable")

// ErrRateLimited is wrapped by the errors of calls refused with 429.
var ErrRateLimited = errors.New("provider rate limit")

// providerError is a refusal in Daytona's error shape.
type providerError struct {
	StatusCode int    `json:"statusCode"`
	Message    string `json:"message"`
}

// call sends one request to the full URL u; out, when set, receives a
// 2xx answer's JSON.
func (a *api) call(ctx context.Context, method, u string, in, out any) error {
	var body io.Reader
	ctype := ""
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body, ctype = bytes.NewReader(b), "application/json"
	}
	resp, err := a.send(ctx, method, u, body, ctype)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 32<<20)).Decode(out); err != nil {
		return sandbox.Wrap(sandbox.ClassUnavailable, err, fmt.Sprintf("the sandbox provider %s answered %s with bad JSON", a.provider, method))
	}
	return nil
}

// send sends a request and returns a 2xx answer (the caller closes its
// body); any other answer is a classified error.
func (a *api) send(ctx context.Context, method, u string, body io.Reader, ctype string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, body) //nolint:gosec // G704: u is the operator's DAYTONA_SERVER_URL or the toolbox URL its provider names, with escaped IDs
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+a.key)
	req.Header.Set("X-Daytona-Source", "agentbox")
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := a.http.Do(req) //nolint:gosec // G704: as above
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, sandbox.Wrap(sandbox.ClassUnavailable, fmt.Errorf("%w: %v", ErrProviderDown, redact(err)),
			fmt.Sprintf("the sandbox provider %s does not answer", a.provider))
	}
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		return resp, nil
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<10))
	msg := strings.TrimSpace(string(raw))
	var pe providerError
	if json.Unmarshal(raw, &pe) == nil && pe.Message != "" {
		msg = pe.Message
	}
	if len(msg) > 300 {
		msg = msg[:300]
	}
	return nil, classify(a.provider, resp, msg)
}

// classify turns a refusal of the provider into an agentbox error class:
// what it says of a sandbox keeps its meaning; what it says of the
// operator's account (key, rate limit) or its own state is this server's
// unavailability, said plainly.
func classify(provider string, resp *http.Response, msg string) error {
	cause := fmt.Errorf("HTTP %d: %s", resp.StatusCode, msg)
	switch s := resp.StatusCode; {
	case s == http.StatusNotFound:
		return sandbox.Wrap(sandbox.ClassNotFound, cause, fmt.Sprintf("not found at the sandbox provider %s: %s", provider, msg))
	case s == http.StatusConflict:
		return sandbox.Wrap(sandbox.ClassConflict, cause, fmt.Sprintf("the sandbox provider %s refused: %s", provider, msg))
	case s == http.StatusBadRequest:
		return sandbox.Wrap(sandbox.ClassInvalid, cause, fmt.Sprintf("the sandbox provider %s refused the request: %s", provider, msg))
	case s == http.StatusTooManyRequests:
		m := fmt.Sprintf("the sandbox provider %s rate-limits this server: %s; retry later", provider, msg)
		if n, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && n >= 0 {
			m = fmt.Sprintf("the sandbox provider %s rate-limits this server: %s; retry in %ds", provider, msg, n)
		}
		return sandbox.Wrap(sandbox.ClassQuota, fmt.Errorf("%w: %v", ErrRateLimited, cause), m)
	case s == http.StatusUnauthorized || s == http.StatusForbidden:
		return sandbox.Wrap(sandbox.ClassUnavailable, cause, fmt.Sprintf("the sandbox provider %s refused this server's key (the operator's DAYTONA_API_KEY)", provider))
	case s == http.StatusNotImplemented:
		return sandbox.Wrap(sandbox.ClassUnavailable, cause, fmt.Sprintf("the sandbox provider %s does not support this: %s", provider, msg))
	case s >= 500:
		return sandbox.Wrap(sandbox.ClassUnavailable, fmt.Errorf("%w: %v", ErrProviderDown, cause), fmt.Sprintf("the sandbox provider %s is unavailable (HTTP %d)", provider, s))
	}
	return sandbox.Wrap(sandbox.ClassUnavailable, cause, fmt.Sprintf("the sandbox provider %s answered HTTP %d: %s", provider, resp.StatusCode, msg))
}

// redact keeps a transport error's kind and drops the URL.
func redact(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return errors.New("timeout")
	}
	return err
}

// The control plane's shapes, the fields used here.
type createIn struct {
	Snapshot           string            `json:"snapshot,omitempty"`
	Labels             map[string]string `json:"labels"`
	Env                map[string]string `json:"env,omitempty"`
	Target             string            `json:"target,omitempty"`
	CPU                *float64          `json:"cpu,omitempty"`
	Memory             *float64          `json:"memory,omitempty"` // GiB
	Disk               *float64          `json:"disk,omitempty"`   // GiB
	AutoStopInterval   int               `json:"autoStopInterval"`
	AutoDeleteInterval int               `json:"autoDeleteInterval"`
	NetworkBlockAll    bool              `json:"networkBlockAll,omitempty"`
}

type sandboxOut struct {
	ID              string            `json:"id"`
	Snapshot        string            `json:"snapshot"`
	Labels          map[string]string `json:"labels"`
	State           string            `json:"state"`
	ErrorReason     string            `json:"errorReason"`
	CPU             float64           `json:"cpu"`
	Memory          float64           `json:"memory"` // GiB
	Disk            float64           `json:"disk"`   // GiB
	ToolboxProxyURL string            `json:"toolboxProxyUrl"`
}

type listOut struct {
	Items      []sandboxOut `json:"items"`
	Page       int          `json:"page"`
	TotalPages int          `json:"totalPages"`
	NextCursor *string      `json:"nextCursor"`
}

type previewOut struct {
	URL   string `json:"url"`
	Token string `json:"token"`
}

func (a *api) sandboxURL(rid string, rest ...string) string {
	u := a.base + "/sandbox/" + url.PathEscape(rid)
	for _, r := range rest {
		u += "/" + r
	}
	return u
}

func (a *api) create(ctx context.Context, in createIn) (sandboxOut, error) {
	var out sandboxOut
	in.Target = a.target
	err := a.call(ctx, http.MethodPost, a.base+"/sandbox", in, &out)
	if err == nil && out.ID == "" {
		err = sandbox.Errorf(sandbox.ClassUnavailable, "the sandbox provider %s answered a create without a sandbox ID", a.provider)
	}
	return out, err
}

func (a *api) get(ctx context.Context, rid string) (sandboxOut, error) {
	var out sandboxOut
	err := a.call(ctx, http.MethodGet, a.sandboxURL(rid), nil, &out)
	return out, err
}

// remove deletes a sandbox; one the provider does not know is gone.
func (a *api) remove(ctx context.Context, rid string) error {
	err := a.call(ctx, http.MethodDelete, a.sandboxURL(rid), nil, nil)
	if sandbox.IsNotFound(err) {
		return nil
	}
	return err
}

func (a *api) start(ctx context.Context, rid string) error {
	return a.call(ctx, http.MethodPost, a.sandboxURL(rid, "start"), nil, nil)
}

func (a *api) stop(ctx context.Context, rid string) error {
	return a.call(ctx, http.MethodPost, a.sandboxURL(rid, "stop"), nil, nil)
}

// renew restarts the sandbox's auto-stop clock: its interval again, and
// its last activity now.
func (a *api) renew(ctx context.Context, rid string, minutes int) error {
	if err := a.call(ctx, http.MethodPost, a.sandboxURL(rid, "autostop", strconv.Itoa(minutes)), nil, nil); err != nil {
		return err
	}
	return a.call(ctx, http.MethodPost, a.sandboxURL(rid, "last-activity"), nil, nil)
}

func (a *api) preview(ctx context.Context, rid string, port int) (previewOut, error) {
	var out previewOut
	err := a.call(ctx, http.MethodGet, a.sandboxURL(rid, "ports", strconv.Itoa(port), "preview-url"), nil, &out)
	if err == nil && out.URL == "" {
		err = sandbox.Errorf(sandbox.ClassUnavailable, "the sandbox provider %s answered a preview URL without a URL", a.provider)
	}
	return out, err
}

// list returns every sandbox of the key whose labels have all of labels,
// page by page (Daytona's cursor, or its page numbers).
func (a *api) list(ctx context.Context, labels map[string]string) ([]sandboxOut, error) {
	lb, err := json.Marshal(labels)
	if err != nil {
		return nil, err
	}
	var all []sandboxOut
	cursor := ""
	for page := 1; page <= 1000; page++ {
		q := url.Values{"labels": {string(lb)}, "limit": {"100"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		} else {
			q.Set("page", strconv.Itoa(page))
		}
		var raw json.RawMessage
		if err := a.call(ctx, http.MethodGet, a.base+"/sandbox?"+q.Encode(), nil, &raw); err != nil {
			return nil, err
		}
		var out listOut
		if t := bytes.TrimSpace(raw); len(t) > 0 && t[0] == '[' {
			// Daytona's unpaginated list: every sandbox at once.
			err = json.Unmarshal(t, &out.Items)
		} else {
			err = json.Unmarshal(t, &out)
		}
		if err != nil {
			return nil, sandbox.Wrap(sandbox.ClassUnavailable, err, fmt.Sprintf("the sandbox provider %s answered a list with bad JSON", a.provider))
		}
		all = append(all, out.Items...)
		switch {
		case out.NextCursor != nil && *out.NextCursor != "":
			cursor = *out.NextCursor
		case cursor == "" && out.TotalPages > page:
		default:
			return all, nil
		}
	}
	return all, nil
}
