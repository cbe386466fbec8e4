package httpapi

import (
	"net/url"
	"strconv"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// logPage is the window and cursor every listing of a store log (events,
// audit) takes from its query: since and until, after and limit.
type logPage struct {
	Since, Until time.Time
	After        uint64
	Limit        int
}

// parseLogPage reads since and until (RFC 3339), after (an entry id: the
// cursor; cursor is used when the query has none, e.g. SSE's
// Last-Event-ID) and limit (positive) from v. A bad value is the caller's
// error, named by its parameter.
func parseLogPage(v url.Values, cursor string) (logPage, error) {
	var p logPage
	for name, dst := range map[string]*time.Time{"since": &p.Since, "until": &p.Until} {
		if raw := v.Get(name); raw != "" {
			t, err := time.Parse(time.RFC3339Nano, raw)
			if err != nil {
				return p, sandbox.Invalid(name, "%s must be an RFC 3339 time, got %q", name, raw)
			}
			*dst = t
		}
	}
	after := v.Get("after")
	if after == "" {
		after = cursor
	}
	if after != "" {
		n, err := strconv.ParseUint(after, 10, 64)
		if err != nil {
			return p, sandbox.Invalid("after", "after must be an entry id (a number), got %q", after)
		}
		p.After = n
	}
	if raw := v.Get("limit"); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 {
			return p, sandbox.Invalid("limit", "limit must be a positive number, got %q", raw)
		}
		p.Limit = n
	}
	return p, nil
}
