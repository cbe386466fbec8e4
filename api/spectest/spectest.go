// Package spectest checks HTTP exchanges with the native API against
// api/openapi.yaml, for tests: an http.RoundTripper that validates every
// request it sends to a /v1 route and every response it gets back, and
// reports what does not match the document.
//
// What it checks, per exchange on a documented /v1 operation:
//
//   - the request (path, query and header parameters, and no query
//     parameter the operation does not declare; a JSON body that can be
//     re-read, up to MaxRequestBody): a request the document refuses must
//     be refused by the server (4xx/5xx); a 1xx-3xx answer to one is a
//     violation — the server accepts what the document says it does not;
//   - the status: documented on the operation, or one of the statuses the
//     document's x-common-errors says any route may answer;
//   - the response headers the operation documents (Retry-After, ...);
//   - the Content-Type: one of the operation's media types for that status;
//   - the body, as the caller reads it (nothing is read ahead of the caller
//     nor held back): a JSON body against its schema once the caller read
//     it whole (up to MaxResponseBody); an NDJSON stream line by line;
//     other media types (files, tarballs, images, websockets after a 101)
//     by type only. What the caller does not read is not checked.
//
// A /v1 request no operation matches is a violation when the server serves
// it (1xx-2xx). Routes under /v1 that speak other protocols (MCP, the
// preview proxy) are not checked.
//
// Object schemas are closed for the check: a property the document does not
// list is a violation (additionalProperties: false), unless the schema
// says otherwise or lists no properties at all. The document is open for
// clients that ignore unknown fields, but a field the server sends and the
// document does not name is exactly the drift this package exists to find.
package spectest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

// Limits of what is held in memory to validate.
const (
	// MaxRequestBody is the largest request body validated; larger ones
	// are sent unchecked.
	MaxRequestBody = 1 << 20
	// MaxResponseBody is the largest JSON response validated; larger ones
	// are passed on unchecked.
	MaxResponseBody = 8 << 20
	// maxLine is the longest NDJSON line validated.
	maxLine = 16 << 20
)

// Violation is one exchange that does not match the document.
type Violation struct {
	Method string
	Path   string // the request's path (and query)
	// Operation is the operationId, or "METHOD /path" of the document
	// (empty when no operation matches).
	Operation string
	Status    int
	Problem   string
	Body      string // the start of the offending body, when there is one
}

func (v Violation) String() string {
	s := fmt.Sprintf("%s %s", v.Method, v.Path)
	if v.Operation != "" {
		s += " (" + v.Operation + ")"
	}
	if v.Status != 0 {
		s += fmt.Sprintf(" → %d", v.Status)
	}
	s += ": " + v.Problem
	if v.Body != "" {
		s += "\n\tbody: " + v.Body
	}
	return s
}

// Validator holds the parsed document.
type Validator struct {
	doc          *openapi3.T
	router       routers.Router
	errSchema    *openapi3.Schema
	commonErrors []int
	schemaOpts   []openapi3.SchemaValidationOption
}

// New parses an OpenAPI document (api.OpenAPI) for validation.
func New(spec []byte) (*Validator, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(spec)
	if err != nil {
		return nil, fmt.Errorf("spectest: parse the document: %w", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		return nil, fmt.Errorf("spectest: the document is not valid OpenAPI: %w", err)
	}
	v := &Validator{doc: doc}
	if s := doc.Components.Schemas["Error"]; s != nil {
		v.errSchema = s.Value
	} else {
		return nil, errors.New("spectest: the document has no Error schema")
	}
	if raw, ok := doc.Extensions["x-common-errors"]; ok {
		codes, ok := raw.([]any)
		if !ok {
			return nil, fmt.Errorf("spectest: x-common-errors is %T, want a list of statuses", raw)
		}
		for _, c := range codes {
			n, err := strconv.Atoi(fmt.Sprint(c))
			if err != nil || n < 400 {
				return nil, fmt.Errorf("spectest: x-common-errors: %v is not an error status", c)
			}
			v.commonErrors = append(v.commonErrors, n)
		}
	}
	if err := doc.WalkSchemas(func(ptr string, s *openapi3.SchemaRef) error {
		if k := only2020(s.Value); k != "" {
			return fmt.Errorf("spectest: %s uses %s, which kin-openapi's built-in validator does not check", ptr, k)
		}
		closeObject(s.Value)
		return nil
	}); err != nil {
		return nil, err
	}
	// Route on the path alone: the document's server (127.0.0.1:8000) is an
	// example, tests listen anywhere.
	routed := *doc
	routed.Servers = nil
	// kin-openapi validates the schemas of a 3.1 document with a JSON
	// Schema 2020-12 library that compiles the schema again on every call
	// (1-3 ms a value, against 10-40 µs for its built-in validator): too
	// slow for every line of every stream of an e2e run on a loaded host.
	// The document uses nothing the built-in validator would miss (checked
	// above, only2020), so the router's copy says 3.0 and the filter takes
	// the built-in path.
	routed.OpenAPI = "3.0.3"
	if v.router, err = gorillamux.NewRouter(&routed); err != nil {
		return nil, fmt.Errorf("spectest: routes: %w", err)
	}
	v.schemaOpts = append(doc.GetSchemaValidationOptions(), openapi3.MultiErrors(), openapi3.VisitAsResponse())
	return v, nil
}

// only2020 names a keyword of s that only the JSON Schema 2020-12 path of
// kin-openapi checks ("" when none).
func only2020(s *openapi3.Schema) string {
	switch {
	case s == nil:
		return ""
	case s.Const != nil:
		return "const"
	case len(s.PrefixItems) != 0:
		return "prefixItems"
	case s.Contains != nil:
		return "contains"
	case len(s.PatternProperties) != 0:
		return "patternProperties"
	case len(s.DependentSchemas) != 0 || len(s.DependentRequired) != 0:
		return "dependentSchemas/dependentRequired"
	case s.PropertyNames != nil:
		return "propertyNames"
	case s.UnevaluatedItems.Has != nil || s.UnevaluatedItems.Schema != nil ||
		s.UnevaluatedProperties.Has != nil || s.UnevaluatedProperties.Schema != nil:
		return "unevaluated*"
	case s.If != nil || s.Then != nil || s.Else != nil:
		return "if/then/else"
	case len(s.Defs) != 0:
		return "$defs"
	case s.ContentSchema != nil:
		return "contentSchema"
	case s.Type != nil && len(*s.Type) > 1:
		return "a list of types"
	}
	return ""
}

// closeObject makes an object schema that lists its properties refuse
// others, unless it says what others may be.
func closeObject(s *openapi3.Schema) {
	if s == nil || len(s.Properties) == 0 || s.AdditionalProperties.Has != nil || s.AdditionalProperties.Schema != nil {
		return
	}
	if s.Type != nil && !s.Type.Is("object") {
		return
	}
	no := false
	s.AdditionalProperties.Has = &no
}

// CommonErrors returns the statuses any operation may answer (the
// document's x-common-errors).
func (v *Validator) CommonErrors() []int { return slices.Clone(v.commonErrors) }

// Checked reports whether exchanges of req are checked: native /v1 routes
// on the API's own host name, not the MCP endpoints nor the preview proxy.
func Checked(req *http.Request) bool {
	p := req.URL.Path
	if !strings.HasPrefix(p, "/v1/") {
		return false
	}
	if req.Host != "" && req.Host != req.URL.Host {
		return false // a preview host name: the sandbox's server answers
	}
	if rest, ok := strings.CutPrefix(p, "/v1/sandboxes/"); ok {
		_, sub, _ := strings.Cut(rest, "/")
		if sub == "mcp" || sub == "ports" || strings.HasPrefix(sub, "ports/") {
			return false
		}
	}
	return true
}

// Transport returns a RoundTripper that sends requests through base
// (http.DefaultTransport when nil) and reports every violation of the
// document by the exchanges Checked selects. report may be called from
// any goroutine, also after RoundTrip returned (NDJSON lines are checked
// as the caller reads them).
func (v *Validator) Transport(base http.RoundTripper, report func(Violation)) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &transport{v: v, base: base, report: report}
}

type transport struct {
	v      *Validator
	base   http.RoundTripper
	report func(Violation)
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !Checked(req) || req.Method == http.MethodHead {
		return t.base.RoundTrip(req)
	}
	route, params, routeErr := t.v.router.FindRoute(req)
	body, haveBody := snapshotBody(req)
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	ex := &exchange{t: t, req: req, resp: resp}
	if routeErr != nil {
		if resp.StatusCode < 300 {
			ex.violation("served, but the document has no such operation (%v)", routeErr)
		}
		return resp, nil
	}
	ex.op = route.Operation.OperationID
	if ex.op == "" {
		ex.op = req.Method + " " + route.Path
	}
	if err := t.v.checkRequest(req, route, params, body, haveBody); err != nil && resp.StatusCode < 400 {
		ex.violation("the server accepted a request the document refuses: %s", brief(err))
	}
	t.v.checkResponse(ex, route, params)
	return resp, nil
}

// exchange is one request and its response, for reporting.
type exchange struct {
	t    *transport
	req  *http.Request
	resp *http.Response
	op   string
}

func (ex *exchange) violation(format string, args ...any) { ex.violationBody(nil, format, args...) }

func (ex *exchange) violationBody(body []byte, format string, args ...any) {
	v := Violation{
		Method: ex.req.Method, Path: ex.req.URL.RequestURI(), Operation: ex.op,
		Status: ex.resp.StatusCode, Problem: fmt.Sprintf(format, args...),
	}
	if len(body) > 0 {
		const n = 300
		if len(body) > n {
			body = append(body[:n:n], "..."...)
		}
		v.Body = string(body)
	}
	ex.t.report(v)
}

// snapshotBody returns a copy of req's body when it can be taken without
// touching the stream the transport sends (GetBody, as requests over
// bytes, strings and buffers have) and is small enough; ok is false when
// the body is not checked.
func snapshotBody(req *http.Request) (body []byte, ok bool) {
	if req.Body == nil || req.Body == http.NoBody {
		return nil, true
	}
	if req.GetBody == nil || req.ContentLength < 0 || req.ContentLength > MaxRequestBody {
		return nil, false
	}
	rc, err := req.GetBody()
	if err != nil {
		return nil, false
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, MaxRequestBody+1))
	if err != nil || len(data) > MaxRequestBody {
		return nil, false
	}
	return data, true
}

func mediaType(ct string) string {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return strings.ToLower(strings.TrimSpace(ct))
	}
	return mt
}

// checkRequest validates a request's parameters and, when it is JSON and
// was taken, its body.
func (v *Validator) checkRequest(req *http.Request, route *routers.Route, params map[string]string, body []byte, haveBody bool) error {
	clone := req.Clone(context.Background())
	clone.Body = io.NopCloser(bytes.NewReader(body))
	opts := &openapi3filter.Options{
		AuthenticationFunc:  openapi3filter.NoopAuthenticationFunc,
		SkipSettingDefaults: true,
		MultiError:          true,
	}
	var extra error
	if rb := route.Operation.RequestBody; rb != nil && rb.Value != nil && len(body) > 0 {
		ct := req.Header.Get("Content-Type")
		if rb.Value.Content.Get(ct) == nil {
			extra = fmt.Errorf("request Content-Type %q is not one of the operation's", ct)
		}
		if mediaType(ct) != "application/json" {
			opts.ExcludeRequestBody = true
		}
	}
	if !haveBody {
		opts.ExcludeRequestBody = true
	}
	in := &openapi3filter.RequestValidationInput{Request: clone, PathParams: params, Route: route, Options: opts}
	err := openapi3filter.ValidateRequest(context.Background(), in)
	return errors.Join(extra, undeclaredQuery(req, route), err)
}

// undeclaredQuery reports query parameters the operation does not declare
// (kin-openapi ignores them): a server that acts on one has a parameter
// the document does not tell about.
func undeclaredQuery(req *http.Request, route *routers.Route) error {
	declared := map[string]bool{}
	for _, ps := range []openapi3.Parameters{route.PathItem.Parameters, route.Operation.Parameters} {
		for _, p := range ps {
			if p.Value != nil && p.Value.In == openapi3.ParameterInQuery {
				declared[p.Value.Name] = true
			}
		}
	}
	var unknown []string
	for name := range req.URL.Query() {
		if !declared[name] {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	return fmt.Errorf("query parameters the operation does not declare: %s", strings.Join(unknown, ", "))
}

// checkResponse validates ex's response; it may replace the response's
// body by one that hands on the same bytes.
func (v *Validator) checkResponse(ex *exchange, route *routers.Route, params map[string]string) {
	resp := ex.resp
	status := resp.StatusCode
	if status >= 300 && status < 400 {
		return // redirects carry no document of their own
	}
	ref := route.Operation.Responses.Status(status)
	if ref == nil {
		ref = route.Operation.Responses.Default()
	}
	if ref == nil || ref.Value == nil {
		if !slices.Contains(v.commonErrors, status) {
			ex.violation("status %d is not documented for the operation (nor in x-common-errors)", status)
			return
		}
		// An error any route may answer: the Error document.
		if mediaType(resp.Header.Get("Content-Type")) != "application/json" {
			ex.violation("error status %d with Content-Type %q, want application/json (Error)", status, resp.Header.Get("Content-Type"))
			return
		}
		v.checkJSON(ex, v.errSchema)
		return
	}
	if status == http.StatusSwitchingProtocols {
		return // a websocket: the body is the connection
	}
	// Headers the response documents.
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: ex.req, PathParams: params, Route: route},
		Status:                 status,
		Header:                 resp.Header,
		Options:                &openapi3filter.Options{ExcludeResponseBody: true, IncludeResponseStatus: true, MultiError: true},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		ex.violation("%s", brief(err))
	}
	content := ref.Value.Content
	if len(content) == 0 {
		return
	}
	ct := resp.Header.Get("Content-Type")
	mt := content.Get(ct)
	if ct == "" || mt == nil {
		if status == http.StatusNoContent || resp.ContentLength == 0 {
			if len(content) > 0 {
				ex.violation("empty response, the document says %s", strings.Join(slices.Sorted(mapKeys(content)), " or "))
			}
			return
		}
		ex.violation("Content-Type %q is not one of the documented %s", ct, strings.Join(slices.Sorted(mapKeys(content)), ", "))
		return
	}
	if mt.Schema == nil || mt.Schema.Value == nil {
		return
	}
	switch mediaType(ct) {
	case "application/json":
		v.checkJSON(ex, mt.Schema.Value)
	case "application/x-ndjson":
		resp.Body = &ndjsonChecker{rc: resp.Body, v: v, ex: ex, schema: mt.Schema.Value}
	}
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// checkJSON validates a JSON response against schema as the caller reads
// it: the body is handed on unchanged, a copy (up to MaxResponseBody) is
// kept, and the copy is validated when the caller reaches its end — or
// closes it having read a whole JSON value (a json.Decoder stops before
// the last newline). A body the caller does not read is not checked;
// nothing is read ahead of the caller, so streams keep their timing.
func (v *Validator) checkJSON(ex *exchange, schema *openapi3.Schema) {
	ex.resp.Body = &jsonChecker{rc: ex.resp.Body, v: v, ex: ex, schema: schema}
}

type jsonChecker struct {
	rc     io.ReadCloser
	v      *Validator
	ex     *exchange
	schema *openapi3.Schema

	mu   sync.Mutex
	buf  []byte
	over bool // longer than MaxResponseBody: not checked
	done bool
}

func (c *jsonChecker) Read(p []byte) (int, error) {
	n, err := c.rc.Read(p)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.over && !c.done {
		if len(c.buf)+n > MaxResponseBody {
			c.over, c.buf = true, nil
		} else {
			c.buf = append(c.buf, p[:n]...)
		}
	}
	if err == io.EOF {
		c.finish(true)
	}
	return n, err
}

func (c *jsonChecker) Close() error {
	c.mu.Lock()
	c.finish(false)
	c.mu.Unlock()
	return c.rc.Close()
}

// finish validates the copy once: at the end of the body, or at a close
// when the copy is a whole JSON value.
func (c *jsonChecker) finish(atEOF bool) {
	if c.done || c.over {
		c.done = true
		return
	}
	data := c.buf
	if !atEOF && !json.Valid(data) {
		return // closed early: nothing whole to check
	}
	c.done, c.buf = true, nil
	var value any
	if err := json.Unmarshal(data, &value); err != nil {
		c.ex.violationBody(data, "the body is not JSON: %v", err)
		return
	}
	if err := c.v.doc.ValidateSchemaJSON(c.schema, value, c.v.schemaOpts...); err != nil {
		c.ex.violationBody(data, "the body does not match its schema: %s", brief(err))
	}
}

// ndjsonChecker hands on an NDJSON stream unchanged and validates each
// complete line against schema as the caller reads it.
type ndjsonChecker struct {
	rc     io.ReadCloser
	v      *Validator
	ex     *exchange
	schema *openapi3.Schema

	mu      sync.Mutex
	partial []byte
	skip    bool // inside a line over maxLine
}

func (c *ndjsonChecker) Read(p []byte) (int, error) {
	n, err := c.rc.Read(p)
	if n > 0 {
		c.feed(p[:n])
	}
	return n, err
}

func (c *ndjsonChecker) Close() error { return c.rc.Close() }

func (c *ndjsonChecker) feed(data []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			if !c.skip {
				c.partial = append(c.partial, data...)
				if len(c.partial) > maxLine {
					c.partial, c.skip = nil, true
				}
			}
			return
		}
		if !c.skip {
			c.line(append(c.partial, data[:i]...))
		}
		c.partial, c.skip = c.partial[:0], false
		data = data[i+1:]
	}
}

func (c *ndjsonChecker) line(line []byte) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return
	}
	var value any
	if err := json.Unmarshal(line, &value); err != nil {
		c.ex.violationBody(line, "an NDJSON line is not JSON: %v", err)
		return
	}
	if err := c.v.doc.ValidateSchemaJSON(c.schema, value, c.v.schemaOpts...); err != nil {
		c.ex.violationBody(bytes.Clone(line), "an NDJSON line does not match its schema: %s", brief(err))
	}
}

// brief is err's message without the schema and value dumps kin-openapi
// adds to each schema error (the violation shows the body instead).
func brief(err error) string {
	var out []string
	dump := false
	for _, l := range strings.Split(err.Error(), "\n") {
		switch {
		case l == "Schema:" || l == "Value:":
			dump = true
		case dump && (l == "" || strings.HasPrefix(l, " ")):
		case strings.TrimSpace(l) == "":
		default:
			dump = false
			out = append(out, strings.TrimSpace(l))
		}
	}
	return strings.Join(out, "; ")
}
