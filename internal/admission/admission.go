// Package admission admits heavy requests (commands, code, file
// transfers, template operations) against a per-user count and a memory
// budget, so no one user can grow the daemon's memory without bound or
// starve the others. A request that does not fit is refused at once with a
// retryable error instead of queueing. One Tracker serves the whole daemon:
// every door into a sandbox (the data plane) and the template routes share
// it.
package admission

import (
	"fmt"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// RequestOverhead is what any heavy request is charged besides its
// buffers: goroutines, transport buffers and protocol framing.
const RequestOverhead = 1 << 20

// retryAfter is the back-off suggested to a refused caller: heavy requests
// usually end within seconds.
const retryAfter = 2 * time.Second

// RetryAfterError marks a refusal the caller may retry after a pause.
type RetryAfterError struct {
	After time.Duration
}

func (e *RetryAfterError) Error() string { return "retry after " + e.After.String() }

// Seconds is the value of a Retry-After header.
func (e *RetryAfterError) Seconds() string {
	return strconv.Itoa(max(1, int((e.After+time.Second-1)/time.Second)))
}

// Tracker tracks heavy requests in flight.
type Tracker struct {
	mu      sync.Mutex
	perUser int   // concurrent heavy requests per user; 0 = no limit
	budget  int64 // bytes all heavy requests may reserve; 0 = no limit
	used    int64
	users   map[string]*userLoad
	// bigSinceFree says a large request ended since memory was last
	// returned to the system.
	bigSinceFree bool
}

// bigRequest is the reservation from which a request's end may return
// memory to the system.
const bigRequest = 16 << 20

// freeEvery spaces the forced collections of freeOSMemory.
const freeEvery = 5 * time.Second

var (
	freeMu      sync.Mutex
	lastFree    time.Time
	freePending bool
)

// freeOSMemory returns the heap a burst of large requests left behind to
// the system once no heavy request is running: at once, or when freeEvery
// has passed since the last time, so bursts do not run one full
// collection after another. Without it the runtime kept 1.4 GiB resident
// for minutes after the flood of TestSecurityMemoryBudget.
func freeOSMemory() {
	freeMu.Lock()
	defer freeMu.Unlock()
	if freePending {
		return
	}
	freePending = true
	time.AfterFunc(max(0, freeEvery-time.Since(lastFree)), func() {
		debug.FreeOSMemory()
		freeMu.Lock()
		lastFree, freePending = time.Now(), false
		freeMu.Unlock()
	})
}

type userLoad struct {
	requests int
	bytes    int64
}

// New returns a tracker admitting perUser concurrent heavy requests per
// user (0: no limit) within budget bytes of buffers (0: no limit), at most
// half of it for one user.
func New(perUser int, budget int64) *Tracker {
	return &Tracker{perUser: perUser, budget: budget, users: map[string]*userLoad{}}
}

// Admit admits one heavy request of owner that will hold up to bytes of
// memory (RequestOverhead is added). The returned release must be called
// when the request ends; calling it again does nothing. A refusal is a
// ClassQuota error carrying a *RetryAfterError, or ClassTooLarge for a
// request no user could ever be granted.
func (a *Tracker) Admit(owner string, bytes int64) (release func(), err error) {
	return a.acquire(owner, 1, bytes+RequestOverhead)
}

// Reserve charges bytes more to owner's memory share without counting a
// request, for buffers a request discovers it needs (a buffered exec's
// output).
func (a *Tracker) Reserve(owner string, bytes int64) (release func(), err error) {
	return a.acquire(owner, 0, bytes)
}

func (a *Tracker) acquire(owner string, requests int, bytes int64) (func(), error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	u := a.users[owner]
	if u == nil {
		u = &userLoad{}
	}
	if requests > 0 && a.perUser > 0 && u.requests+requests > a.perUser {
		return nil, refused("user %q already has %d heavy requests (exec, code, file transfers, snapshots) in flight, the limit (MAX_REQUESTS_PER_USER)", owner, u.requests)
	}
	if a.budget > 0 {
		if bytes > a.budget/2 {
			return nil, sandbox.Errorf(sandbox.ClassTooLarge, "request needs %d MiB of buffers, more than this server grants one user (REQUEST_MEMORY/2)", bytes>>20)
		}
		// Half of the budget per user: one user can never take it all.
		if u.bytes+bytes > a.budget/2 {
			return nil, refused("user %q holds %d MiB of request buffers, the most one user may (REQUEST_MEMORY/2)", owner, u.bytes>>20)
		}
		if a.used+bytes > a.budget {
			return nil, refused("the server's request memory (REQUEST_MEMORY) is in use by other requests")
		}
	}
	a.users[owner] = u
	u.requests += requests
	u.bytes += bytes
	a.used += bytes
	var once sync.Once
	return func() {
		once.Do(func() {
			a.mu.Lock()
			defer a.mu.Unlock()
			u.requests -= requests
			u.bytes -= bytes
			a.used -= bytes
			if u.requests == 0 && u.bytes == 0 {
				delete(a.users, owner)
			}
			if bytes >= bigRequest {
				a.bigSinceFree = true
			}
			if a.used == 0 && a.bigSinceFree {
				a.bigSinceFree = false
				freeOSMemory()
			}
		})
	}, nil
}

func refused(format string, args ...any) error {
	return &sandbox.Error{Class: sandbox.ClassQuota, Msg: fmt.Sprintf(format, args...) + "; retry later",
		Err: &RetryAfterError{After: retryAfter}}
}
