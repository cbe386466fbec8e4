package e2b

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
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// api is a client of the provider's lifecycle REST API (X-API-Key).
type api struct {
	base     string // lifecycle API base URL, no trailing slash
	key      string // the operator's provider key: never in an error or log
	provider string // the provider's name, for errors
	http     *http.Client
}

// ErrProviderDown is wrapped by the errors of calls the provider did not
// answer (connection refused, a timeout, a 5xx): the backend then keeps
// what it knows and retries its housekeeping later.
var ErrProviderDown = errors.New("provider unavailable")

// ErrRateLimited is wrapped by the errors of calls the provider refused
// with 429.
var ErrRateLimited = errors.New("provider rate limit")

// providerError is a refusal in E2B's error shape.
type providerError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// do sends one call; out, when set, receives a 2xx answer's JSON. The
// status is returned with a nil error for every 2xx.
func (a *api) do(ctx context.Context, method, path string, in, out any) (int, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, body)
	if err != nil {
		return 0, err
	}
	req.Header.Set("X-API-Key", a.key)
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		return 0, sandbox.Wrap(sandbox.ClassUnavailable, fmt.Errorf("%w: %v", ErrProviderDown, redact(err)),
			fmt.Sprintf("the sandbox provider %s does not answer", a.provider))
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		if out != nil && resp.StatusCode != http.StatusNoContent {
			if err := json.NewDecoder(io.LimitReader(resp.Body, 8<<20)).Decode(out); err != nil {
				return resp.StatusCode, sandbox.Wrap(sandbox.ClassUnavailable, err, fmt.Sprintf("the sandbox provider %s answered %s %s with bad JSON", a.provider, method, path))
			}
		}
		return resp.StatusCode, nil
	}
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<10))
	var pe providerError
	msg := strings.TrimSpace(string(raw))
	if json.Unmarshal(raw, &pe) == nil && pe.Message != "" {
		msg = pe.Message
	}
	if len(msg) > 300 {
		msg = msg[:300]
	}
	return resp.StatusCode, classify(a.provider, resp, msg)
}

// classify turns a refusal of the provider into an agentbox error class:
// what the provider says about a sandbox keeps its meaning (not found,
// conflict, invalid); what it says about the operator's account (its key
// refused, its rate limit, its quota) or its own state is this server's
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
		if ra := resp.Header.Get("Retry-After"); ra != "" {
			if n, err := strconv.Atoi(ra); err == nil && n >= 0 {
				m = fmt.Sprintf("the sandbox provider %s rate-limits this server: %s; retry in %ds", provider, msg, n)
			}
		}
		return sandbox.Wrap(sandbox.ClassQuota, fmt.Errorf("%w: %v", ErrRateLimited, cause), m)
	case s == http.StatusUnauthorized || s == http.StatusForbidden:
		return sandbox.Wrap(sandbox.ClassUnavailable, cause, fmt.Sprintf("the sandbox provider %s refused this server's key (the operator's E2B_API_KEY)", provider))
	case s >= 500:
		return sandbox.Wrap(sandbox.ClassUnavailable, fmt.Errorf("%w: %v", ErrProviderDown, cause), fmt.Sprintf("the sandbox provider %s is unavailable (HTTP %d)", provider, s))
	}
	return sandbox.Wrap(sandbox.ClassUnavailable, cause, fmt.Sprintf("the sandbox provider %s answered HTTP %d: %s", provider, resp.StatusCode, msg))
}

// redact keeps a transport error's kind and drops the URL (which holds
// nothing secret, but names the operator's provider set-up).
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

// The lifecycle API's shapes (protocols/e2b.md), the fields used here.
type createIn struct {
	TemplateID          string            `json:"templateID"`
	Timeout             int               `json:"timeout"`
	Secure              bool              `json:"secure"`
	AllowInternetAccess *bool             `json:"allow_internet_access,omitempty"`
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars,omitempty"`
	Network             *networkIn        `json:"network,omitempty"`
}

type networkIn struct {
	AllowOut []string `json:"allowOut,omitempty"`
	DenyOut  []string `json:"denyOut,omitempty"`
}

type sandboxOut struct {
	SandboxID          string            `json:"sandboxID"`
	TemplateID         string            `json:"templateID"`
	EnvdVersion        string            `json:"envdVersion"`
	EnvdAccessToken    string            `json:"envdAccessToken"`
	TrafficAccessToken *string           `json:"trafficAccessToken"`
	Domain             *string           `json:"domain"`
	StartedAt          time.Time         `json:"startedAt"`
	CPUCount           int               `json:"cpuCount"`
	MemoryMB           int64             `json:"memoryMB"`
	DiskSizeMB         int64             `json:"diskSizeMB"`
	Metadata           map[string]string `json:"metadata"`
	State              string            `json:"state"`
}

type metricOut struct {
	CPUCount   int     `json:"cpuCount"`
	CPUUsedPct float64 `json:"cpuUsedPct"`
	MemUsed    int64   `json:"memUsed"`
	MemTotal   int64   `json:"memTotal"`
	DiskUsed   int64   `json:"diskUsed"`
	DiskTotal  int64   `json:"diskTotal"`
}

func (a *api) create(ctx context.Context, in createIn) (sandboxOut, error) {
	var out sandboxOut
	_, err := a.do(ctx, http.MethodPost, "/sandboxes", in, &out)
	if err == nil && out.SandboxID == "" {
		err = sandbox.Errorf(sandbox.ClassUnavailable, "the sandbox provider %s answered a create without a sandbox ID", a.provider)
	}
	return out, err
}

func (a *api) get(ctx context.Context, rid string) (sandboxOut, error) {
	var out sandboxOut
	_, err := a.do(ctx, http.MethodGet, "/sandboxes/"+url.PathEscape(rid), nil, &out)
	return out, err
}

// kill deletes a sandbox; one the provider does not know is gone already.
func (a *api) kill(ctx context.Context, rid string) error {
	_, err := a.do(ctx, http.MethodDelete, "/sandboxes/"+url.PathEscape(rid), nil, nil)
	if sandbox.IsNotFound(err) {
		return nil
	}
	return err
}

func (a *api) pause(ctx context.Context, rid string) error {
	_, err := a.do(ctx, http.MethodPost, "/sandboxes/"+url.PathEscape(rid)+"/pause", struct{}{}, nil)
	if sandbox.ClassOf(err) == sandbox.ClassConflict {
		// Paused already (E2B answers 409 for a sandbox not running):
		// pausing a paused sandbox is not an error here.
		if got, gerr := a.get(ctx, rid); gerr == nil && got.State == "paused" {
			return nil
		}
	}
	return err
}

// connect resumes a paused sandbox (or keeps a running one), to live at
// least timeout from now.
func (a *api) connect(ctx context.Context, rid string, timeout time.Duration) (sandboxOut, error) {
	var out sandboxOut
	_, err := a.do(ctx, http.MethodPost, "/sandboxes/"+url.PathEscape(rid)+"/connect", map[string]int{"timeout": int(timeout / time.Second)}, &out)
	return out, err
}

func (a *api) setTimeout(ctx context.Context, rid string, timeout time.Duration) error {
	_, err := a.do(ctx, http.MethodPost, "/sandboxes/"+url.PathEscape(rid)+"/timeout", map[string]int{"timeout": int(timeout / time.Second)}, nil)
	return err
}

func (a *api) metrics(ctx context.Context, rid string) ([]metricOut, error) {
	var out []metricOut
	_, err := a.do(ctx, http.MethodGet, "/sandboxes/"+url.PathEscape(rid)+"/metrics", nil, &out)
	return out, err
}

// list returns every sandbox of the key whose metadata has all of labels,
// running or paused, page by page.
func (a *api) list(ctx context.Context, labels map[string]string) ([]sandboxOut, error) {
	// The metadata filter is k=v&... with keys and values escaped, itself
	// one query parameter (escaped again), as the SDKs send it.
	pairs := make([]string, 0, len(labels))
	for k, v := range labels {
		pairs = append(pairs, url.QueryEscape(k)+"="+url.QueryEscape(v))
	}
	var all []sandboxOut
	next := ""
	for page := 0; page < 1000; page++ {
		q := url.Values{"metadata": {strings.Join(pairs, "&")}, "state": {"running,paused"}, "limit": {"100"}}
		if next != "" {
			q.Set("nextToken", next)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.base+"/v2/sandboxes?"+q.Encode(), nil)
		if err != nil {
			return nil, err
		}
		var out []sandboxOut
		hdr, err := a.doRaw(ctx, req, &out)
		if err != nil {
			return nil, err
		}
		all = append(all, out...)
		if next = hdr.Get("X-Next-Token"); next == "" {
			return all, nil
		}
	}
	return all, nil
}

// doRaw is do of a prepared request, returning the answer's header.
func (a *api) doRaw(ctx context.Context, req *http.Request, out any) (http.Header, error) {
	req.Header.Set("X-API-Key", a.key)
	resp, err := a.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, sandbox.Wrap(sandbox.ClassUnavailable, fmt.Errorf("%w: %v", ErrProviderDown, redact(err)),
			fmt.Sprintf("the sandbox provider %s does not answer", a.provider))
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<10))
		return nil, classify(a.provider, resp, strings.TrimSpace(string(raw)))
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 32<<20)).Decode(out); err != nil {
		return nil, sandbox.Wrap(sandbox.ClassUnavailable, err, fmt.Sprintf("the sandbox provider %s answered a list with bad JSON", a.provider))
	}
	return resp.Header, nil
}
