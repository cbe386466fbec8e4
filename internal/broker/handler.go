package broker

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/audit"
	"github.com/agentbox/agentbox/internal/netpolicy"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// secretRef is a reference to a secret in a rule's header value.
var secretRef = regexp.MustCompile(`\$\{secret:([A-Za-z_][A-Za-z0-9_-]{0,63})\}`)

// SecretRefs returns the secret names a rule uses: its bound secrets and
// those its header values reference.
func SecretRefs(r sandbox.EgressRule) []string {
	names := append([]string(nil), r.Secrets...)
	for _, v := range r.Headers {
		for _, m := range secretRef.FindAllStringSubmatch(v, -1) {
			names = append(names, m[1])
		}
	}
	return names
}

// errUnavailable ends a request whose secret cannot be had: it is not
// sent without it.
var errUnavailable = errors.New("a secret of this sandbox's egress rules is unavailable")

func hostOnly(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	return strings.TrimSuffix(strings.ToLower(h), ".")
}

func pathMatches(rule sandbox.EgressRule, method, path string) bool {
	if len(rule.Methods) > 0 {
		ok := false
		for _, m := range rule.Methods {
			ok = ok || m == method
		}
		if !ok {
			return false
		}
	}
	if len(rule.Paths) == 0 {
		return true
	}
	for _, p := range rule.Paths {
		if strings.HasPrefix(path, p) {
			return true
		}
	}
	return false
}

// serveHTTP forwards one intercepted request upstream, changed as the
// sandbox's rules for its host say.
func (b *Broker) serveHTTP(w http.ResponseWriter, r *http.Request) {
	info, ok := r.Context().Value(connKey{}).(*connInfo)
	if !ok {
		http.Error(w, "agentbox broker: no connection", http.StatusInternalServerError)
		return
	}
	// The request must be for the name the TLS connection was opened to:
	// rules matched that name, and upstream is verified for it.
	if hostOnly(r.Host) != info.name {
		http.Error(w, "agentbox broker: the request's host is not the TLS server name", http.StatusMisdirectedRequest)
		return
	}
	// Rules as they are now (the policy may have changed since the
	// connection opened).
	target, ok := b.cfg.Policy.Source(info.src)
	if !ok || target.ID != info.target.ID {
		http.Error(w, "agentbox broker: sandbox gone", http.StatusBadGateway)
		return
	}
	if err := b.cfg.Policy.Permit(info.src, info.dst.Addr(), info.name); err != nil {
		http.Error(w, "agentbox broker: the sandbox's egress policy denies this host", http.StatusForbidden)
		return
	}
	var rules []sandbox.EgressRule
	for _, rule := range target.Network.Rules {
		if netpolicy.RuleMatchesHost(rule, info.name) {
			rules = append(rules, rule)
		}
	}
	out, injected, err := b.transform(r, info, rules)
	if err != nil {
		b.log.Warn("broker: request not sent", "sandbox", target.ID, "host", info.name, "err", err)
		http.Error(w, "agentbox broker: "+errUnavailable.Error(), http.StatusBadGateway)
		return
	}
	for _, name := range injected {
		b.cfg.Audit.Record(audit.Entry{User: info.owner, Remote: info.src.String(), Method: r.Method,
			Path: info.name, Route: "egress broker: secret " + name, Target: string(target.ID)})
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL = out.URL
			pr.Out.Host = r.Host
			pr.Out.Header = out.Header
			if out.Body != nil {
				pr.Out.Body, pr.Out.ContentLength = out.Body, out.ContentLength
			}
		},
		Transport: b.transport(target.ID, info),
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			b.log.Debug("broker: upstream failed", "sandbox", target.ID, "host", info.name, "err", err)
			http.Error(w, "agentbox broker: upstream failed", http.StatusBadGateway)
		},
		ErrorLog: b.intercept.ErrorLog,
	}
	rp.ServeHTTP(w, r)
}

// transform returns the request's URL and headers as they go upstream and
// the names of the secrets put in.
func (b *Broker) transform(r *http.Request, info *connInfo, rules []sandbox.EgressRule) (*http.Request, []string, error) {
	ctx := r.Context()
	values := map[string]string{}
	var used []string
	reveal := func(name string) (string, string, error) {
		v, meta, err := b.cfg.Secrets.Reveal(ctx, info.owner, name)
		if err != nil {
			return "", "", err
		}
		values[name] = v
		return v, meta.Placeholder, nil
	}
	out := &http.Request{URL: &url.URL{Scheme: "https", Host: r.Host, Path: r.URL.Path, RawPath: r.URL.RawPath,
		RawQuery: r.URL.RawQuery}, Header: r.Header.Clone()}
	mark := func(name string) {
		for _, u := range used {
			if u == name {
				return
			}
		}
		used = append(used, name)
	}
	// Placeholders of the secrets bound to this host, wherever the
	// sandbox put them in the header values, the URL or the body.
	bound := map[string]boundSecret{}
	for _, rule := range rules {
		for _, name := range rule.Secrets {
			v, ph, err := reveal(name)
			if err != nil {
				return nil, nil, err
			}
			hit := false
			for k, vs := range out.Header {
				for i, hv := range vs {
					if strings.Contains(hv, ph) {
						vs[i], hit = strings.ReplaceAll(hv, ph, v), true
					}
				}
				out.Header[k] = vs
			}
			if strings.Contains(out.URL.Path, ph) || strings.Contains(out.URL.RawQuery, ph) || strings.Contains(out.URL.RawPath, ph) {
				out.URL.Path = strings.ReplaceAll(out.URL.Path, ph, v)
				out.URL.RawPath = strings.ReplaceAll(out.URL.RawPath, ph, url.PathEscape(v))
				out.URL.RawQuery = strings.ReplaceAll(out.URL.RawQuery, ph, url.QueryEscape(v))
				hit = true
			}
			if hit {
				mark(name)
			}
			bound[ph] = boundSecret{name: name, value: v}
		}
	}
	if len(bound) > 0 {
		hits, err := substituteBody(r, out, bound)
		if err != nil {
			return nil, nil, err
		}
		for _, name := range hits {
			mark(name)
		}
	}
	// Headers the rules set, for the methods and paths they name.
	for _, rule := range rules {
		if !pathMatches(rule, r.Method, r.URL.Path) {
			continue
		}
		for k, tmpl := range rule.Headers {
			var ferr error
			val := secretRef.ReplaceAllStringFunc(tmpl, func(m string) string {
				name := secretRef.FindStringSubmatch(m)[1]
				v, ok := values[name]
				if !ok {
					var err error
					if v, _, err = reveal(name); err != nil {
						ferr = err
						return ""
					}
				}
				mark(name)
				return v
			})
			if ferr != nil {
				return nil, nil, ferr
			}
			out.Header.Set(k, val)
		}
	}
	return out, used, nil
}

// MaxBodySubstitution is the largest request body in which the
// placeholders of bound secrets are replaced. A larger one, one of unknown
// length (chunked: it may be a stream the client feeds as answers come)
// or one with a Content-Encoding goes upstream as the sandbox sent it:
// placeholders stay placeholders, nothing leaks.
const MaxBodySubstitution = 1 << 20

type boundSecret struct{ name, value string }

// substituteBody replaces bound placeholders in r's body when its length
// is known, small, and it is not compressed, setting out's body and
// length to the result; it returns the names of the secrets put in.
func substituteBody(r *http.Request, out *http.Request, bound map[string]boundSecret) ([]string, error) {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength <= 0 || r.ContentLength > MaxBodySubstitution ||
		r.Header.Get("Content-Encoding") != "" {
		return nil, nil
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, r.ContentLength))
	if err != nil {
		return nil, fmt.Errorf("read the request body: %w", err)
	}
	var hits []string
	for ph, sec := range bound {
		if bytes.Contains(body, []byte(ph)) {
			body = bytes.ReplaceAll(body, []byte(ph), []byte(sec.value))
			hits = append(hits, sec.name)
		}
	}
	sort.Strings(hits)
	out.Body, out.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	return hits, nil
}

// transport returns the sandbox's upstream client: it dials the address
// the sandbox connected to (already permitted) and verifies the server
// for the requested name.
func (b *Broker) transport(id sandbox.ID, info *connInfo) http.RoundTripper {
	b.mu.Lock()
	defer b.mu.Unlock()
	if tr, ok := b.clients[id]; ok {
		return &dstTransport{tr: tr, info: info}
	}
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	src := info.src
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			// The connection goes to the sandbox's original destination
			// for this host, re-checked against its policy.
			dst, ok := ctx.Value(dstKey{}).(*connInfo)
			if !ok {
				return nil, errors.New("no destination")
			}
			if err := b.cfg.Policy.Permit(src, dst.dst.Addr(), dst.name); err != nil {
				return nil, err
			}
			return d.DialContext(ctx, network, dst.dst.String())
		},
		TLSClientConfig:     &tls.Config{RootCAs: b.cfg.RootCAs, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 30 * time.Second,
	}
	b.clients[id] = tr
	return &dstTransport{tr: tr, info: info}
}

type dstKey struct{}

// dstTransport puts the connection's destination in the request context
// for the dialer.
type dstTransport struct {
	tr   *http.Transport
	info *connInfo
}

func (t *dstTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return t.tr.RoundTrip(r.WithContext(context.WithValue(r.Context(), dstKey{}, t.info)))
}
