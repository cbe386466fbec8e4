package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/dataplane"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// maxWatchesPerUser bounds the watch streams one user holds open at once:
// each is a connection and a goroutine of the daemon for as long as the
// client likes, outside the admission of heavy requests.
const maxWatchesPerUser = 32

// watchCount counts open watch streams per server and user.
var watchCount = struct {
	sync.Mutex
	n map[watchKey]int
}{n: map[watchKey]int{}}

type watchKey struct {
	s    *Server
	user string
}

// holdWatch takes one of the user's watch slots, or refuses with quota_exceeded.
func (s *Server) holdWatch(user string) (release func(), err error) {
	k := watchKey{s, user}
	watchCount.Lock()
	defer watchCount.Unlock()
	if watchCount.n[k] >= maxWatchesPerUser {
		return nil, sandbox.Errorf(sandbox.ClassQuota, "you have %d directory watches open, the most allowed at once; close some first", maxWatchesPerUser)
	}
	watchCount.n[k]++
	return func() {
		watchCount.Lock()
		defer watchCount.Unlock()
		if watchCount.n[k]--; watchCount.n[k] <= 0 {
			delete(watchCount.n, k)
		}
	}, nil
}

// watchKeepalive is how often an idle watch stream sends a keepalive line,
// so clients and proxies with read timeouts keep the connection.
const watchKeepalive = 15 * time.Second

type watchEventOut struct {
	Type  string    `json:"type"`
	Name  string    `json:"name,omitempty"`
	Entry *entryOut `json:"entry,omitempty"`
}

// watchFiles serves GET /v1/sandboxes/{id}/files/watch: the changes below a
// directory as NDJSON, starting with a "start" line once the watch is in
// place (every change after it is reported). Refusals (no such sandbox or
// directory, too many watches) come before the stream as JSON errors. The
// watch ends when the client goes away.
func (s *Server) watchFiles(w http.ResponseWriter, r *http.Request) error {
	release, err := s.holdWatch(userOf(r))
	if err != nil {
		return err
	}
	defer release()
	path, dr, err := s.fileTarget(r)
	if err != nil {
		return err
	}
	// Admitted like any request; the stream then lives outside the count
	// of requests in flight, under the watch cap above.
	defer dr.End()
	recursive := false
	if v := r.URL.Query().Get("recursive"); v != "" {
		recursive, err = strconv.ParseBool(v)
		if err != nil {
			return badRequest("recursive", "recursive must be true or false")
		}
	}
	watcher, err := dr.Watch(r.Context(), path, fileUser(r), dataplane.WatchOptions{Recursive: recursive, IncludeEntry: true})
	dr.End()
	if err != nil {
		return err
	}
	defer watcher.Close()

	type next struct {
		ev  dataplane.FSEvent
		err error
	}
	events := make(chan next)
	go func() {
		for {
			ev, err := watcher.Next()
			select {
			case events <- next{ev, err}:
			case <-r.Context().Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()

	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	enc := json.NewEncoder(w)
	send := func(v watchEventOut) error {
		if err := enc.Encode(v); err != nil {
			return err
		}
		return rc.Flush()
	}
	if err := send(watchEventOut{Type: "start"}); err != nil {
		return nil // the client left
	}
	tick := time.NewTicker(watchKeepalive)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return nil
		case <-tick.C:
			if send(watchEventOut{Type: "keepalive"}) != nil {
				return nil
			}
		case n := <-events:
			if n.err != nil {
				// The directory went away or the sandbox stopped: the
				// stream ends; the status is already out.
				logger(r).Debug("watch ended", "err", n.err)
				return nil
			}
			out := watchEventOut{Type: string(n.ev.Op), Name: n.ev.Name}
			if n.ev.Entry != nil {
				e := entryJSON(*n.ev.Entry)
				out.Entry = &e
			}
			if send(out) != nil {
				return nil
			}
		}
	}
}
