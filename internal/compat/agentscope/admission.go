package agentscope

import (
	"context"
	"net/http"
	"unicode/utf8"
	"unsafe"

	"github.com/agentbox/agentbox/internal/dataplane"
	"github.com/agentbox/agentbox/internal/httpapi"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// Tool calls and the sandbox API's routes work in a sandbox through a
// data-plane request (package dataplane): admitted against the caller's
// share of the daemon (MAX_REQUESTS_PER_USER, REQUEST_MEMORY), confined
// to /workspace. The route that admits a call puts its request in the
// context; the memory a tool buffers is reserved on it before it is read
// and held until the answer is written.

type requestKey struct{}

// withRequest returns ctx carrying dr.
func withRequest(ctx context.Context, dr *dataplane.Request) context.Context {
	return context.WithValue(ctx, requestKey{}, dr)
}

// work returns the data-plane request of ctx for r, or, for work the
// daemon does on its own (workspace copies at release, MCP servers it
// keeps), one it opens without counting it against the user; done ends
// what work opened.
func (s *Server) work(ctx context.Context, r *record) (dr *dataplane.Request, done func(), err error) {
	if dr, ok := ctx.Value(requestKey{}).(*dataplane.Request); ok && dr.Sandbox() == r.ID {
		return dr, func() {}, nil
	}
	dr, err = s.dp.Begin(ctx, r.Owner, r.ID, dataplane.Confine(workspaceRoot), dataplane.Uncounted())
	if err != nil {
		return nil, nil, err
	}
	return dr, dr.End, nil
}

// ends are what a manager route runs once its answer is written.
type ends struct{ fns []func() }

type endsKey struct{}

func withEnds(ctx context.Context) (context.Context, *ends) {
	e := &ends{}
	return context.WithValue(ctx, endsKey{}, e), e
}

func (e *ends) run() {
	for _, fn := range e.fns {
		fn()
	}
}

// begin opens the admitted, /workspace-confined data-plane request of a
// call on r and returns ctx carrying it. A manager route's request ends
// once its answer is written; elsewhere the caller ends it with done.
func (s *Server) begin(ctx context.Context, r *record) (context.Context, func(), error) {
	dr, err := s.dp.Begin(ctx, r.Owner, r.ID, dataplane.Confine(workspaceRoot))
	if err != nil {
		return ctx, nil, err
	}
	if e, ok := ctx.Value(endsKey{}).(*ends); ok {
		e.fns = append(e.fns, dr.End)
		return withRequest(ctx, dr), func() {}, nil
	}
	return withRequest(ctx, dr), dr.End, nil
}

// reserve charges n more bytes to the request of ctx. A context without
// one (a call the daemon makes itself) is not charged.
func reserve(ctx context.Context, n int64) error {
	if dr, ok := ctx.Value(requestKey{}).(*dataplane.Request); ok {
		return dr.Reserve(n)
	}
	return nil
}

// jsonCost is what writing text in a JSON answer costs: its encoding
// (escapes included, as encoding/json writes them without HTML escaping)
// in a buffer that may have doubled to hold it. The text itself is
// charged where it was read.
func jsonCost(text string) int64 {
	n := int64(0)
	for i := 0; i < len(text); {
		c := text[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t' || c == '\b' || c == '\f':
				n += 2
			case c < 0x20:
				n += 6 // \u00XX
			default:
				n++
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(text[i:])
		if r == utf8.RuneError && size == 1 || r == '\u2028' || r == '\u2029' {
			n += 6
		} else {
			n += int64(size)
		}
		i += size
	}
	return 2 * n
}

// textOut is a tool's text answer, built in place: file content is read
// straight into it, and its memory is reserved before it grows.
type textOut struct {
	ctx context.Context
	buf []byte
}

func (o *textOut) Len() int { return len(o.buf) }

// String returns the text without a copy; o must not be written after.
func (o *textOut) String() string { return unsafe.String(unsafe.SliceData(o.buf), len(o.buf)) }

// grow makes room for n more bytes, reserving the larger buffer first
// (the smaller one stays charged: it is garbage, not yet free).
func (o *textOut) grow(n int) error {
	if n <= cap(o.buf)-len(o.buf) {
		return nil
	}
	size := max(2*cap(o.buf), len(o.buf)+n)
	if err := reserve(o.ctx, int64(size)); err != nil {
		return err
	}
	b := make([]byte, len(o.buf), size)
	copy(b, o.buf)
	o.buf = b
	return nil
}

func (o *textOut) Write(p []byte) (int, error) {
	if err := o.grow(len(p)); err != nil {
		return 0, err
	}
	o.buf = append(o.buf, p...)
	return len(p), nil
}

func (o *textOut) writeString(s string) error {
	if err := o.grow(len(s)); err != nil {
		return err
	}
	o.buf = append(o.buf, s...)
	return nil
}

// truncate drops what was written after the first n bytes.
func (o *textOut) truncate(n int) { o.buf = o.buf[:n] }

// quotaStatus answers an admission refusal: 429 with Retry-After; ok is
// false for other errors.
func quotaStatus(w http.ResponseWriter, err error) (int, bool) {
	if sandbox.ClassOf(err) != sandbox.ClassQuota {
		return 0, false
	}
	httpapi.SetRetryAfter(w, err)
	return http.StatusTooManyRequests, true
}
