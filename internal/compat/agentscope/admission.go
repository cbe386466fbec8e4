package agentscope

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"unicode/utf8"
	"unsafe"

	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// Tool calls and the sandbox API's routes hold an agent connection and
// buffers in the daemon while they run, like the native API's exec and
// file routes: each is admitted against the manager's per-user count
// (MAX_REQUESTS_PER_USER) and the memory it buffers is reserved from the
// request memory budget (REQUEST_MEMORY) before it is read, and held
// until the answer is written.

// ticket is one admitted request.
type ticket struct {
	m     *manager.Manager
	owner string

	mu       sync.Mutex
	releases []func()
}

type ticketKey struct{}

// admit admits one heavy request of owner and returns a context carrying
// its ticket; done releases everything the request reserved.
func (s *Server) admit(ctx context.Context, owner string) (context.Context, func(), error) {
	release, err := s.m.Admit(owner, 0)
	if err != nil {
		return ctx, nil, err
	}
	t := &ticket{m: s.m, owner: owner, releases: []func(){release}}
	return context.WithValue(ctx, ticketKey{}, t), t.done, nil
}

// reserve charges n more bytes to the request of ctx. A context without
// a ticket (a call the daemon makes itself) is not charged.
func reserve(ctx context.Context, n int64) error {
	t, _ := ctx.Value(ticketKey{}).(*ticket)
	if t == nil || n <= 0 {
		return nil
	}
	release, err := t.m.Reserve(t.owner, n)
	if err != nil {
		return err
	}
	t.mu.Lock()
	t.releases = append(t.releases, release)
	t.mu.Unlock()
	return nil
}

func (t *ticket) done() {
	t.mu.Lock()
	rs := t.releases
	t.releases = nil
	t.mu.Unlock()
	for _, r := range rs {
		r()
	}
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
	var ra *manager.RetryAfterError
	if errors.As(err, &ra) {
		w.Header().Set("Retry-After", ra.Seconds())
	}
	return http.StatusTooManyRequests, true
}
