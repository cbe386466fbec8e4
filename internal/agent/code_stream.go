package agent

import (
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/agent/codeinterp"
)

const (
	// defaultCodeKeepalive spaces keepalive events when the client does
	// not ask for another interval (Keepalive-Ping-Interval, seconds).
	defaultCodeKeepalive = 5 * time.Second
	// codeWriteTimeout: a client that does not take an event for this long
	// is treated as gone (its execution gets interrupted).
	codeWriteTimeout = 30 * time.Second
)

// codeStream writes an execution's events as NDJSON, flushing each line,
// with keepalive lines in between. It is safe for concurrent use.
type codeStream struct {
	mu  sync.Mutex
	rc  *http.ResponseController
	enc *json.Encoder
	err error

	stop chan struct{}
	done chan struct{}
}

// startCodeStream sends the 200 header at once (E2B clients time out
// waiting for headers while an execution is queued) and starts the
// keepalives.
func startCodeStream(w http.ResponseWriter, r *http.Request) *codeStream {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	cs := &codeStream{rc: http.NewResponseController(w), enc: enc, stop: make(chan struct{}), done: make(chan struct{})}
	_ = cs.rc.Flush()
	interval := keepaliveInterval(r.Header)
	if interval == 0 {
		interval = defaultCodeKeepalive
	}
	go cs.keepalive(interval)
	return cs
}

// emit writes one event (codeinterp.Emit).
func (cs *codeStream) emit(ev codeinterp.Event) error {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.err != nil {
		return cs.err
	}
	_ = cs.rc.SetWriteDeadline(time.Now().Add(codeWriteTimeout))
	if err := cs.enc.Encode(ev); err != nil {
		cs.err = err
		return err
	}
	if err := cs.rc.Flush(); err != nil {
		cs.err = err
		return err
	}
	return nil
}

func (cs *codeStream) keepalive(interval time.Duration) {
	defer close(cs.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			if cs.emit(codeinterp.KeepaliveEvent()) != nil {
				return
			}
		case <-cs.stop:
			return
		}
	}
}

// close stops the keepalives; nothing is written afterwards.
func (cs *codeStream) close() {
	close(cs.stop)
	<-cs.done
	_ = cs.rc.SetWriteDeadline(time.Time{})
}
