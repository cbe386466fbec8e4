package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"

	fspb "github.com/agentbox/agentbox/api/proto/filesystem"
)

const (
	// pollWatcherIdle is how long a polling watcher lives without a
	// GetWatcherEvents call before it is removed: clients that forget to
	// call RemoveWatcher must not leak inotify instances.
	pollWatcherIdle = 10 * time.Minute
	// maxPollWatchers caps concurrently registered polling watchers.
	maxPollWatchers = 256
)

// WatchDir streams a start event, then filesystem events below the
// directory (and keepalives when asked to) until the client goes away.
func (f *fsService) WatchDir(ctx context.Context, req *connect.Request[fspb.WatchDirRequest], stream *connect.ServerStream[fspb.WatchDirResponse]) error {
	t, err := f.watchTarget(req.Header(), req.Msg.GetPath())
	if err != nil {
		return err
	}
	w, err := t.start(f.s, req.Msg.GetRecursive(), req.Msg.GetIncludeEntry(), req.Msg.GetAllowNetworkMounts())
	if err != nil {
		if isOutsideRoot(err) {
			// Also a real response header, not only end-of-stream
			// metadata, for clients that look at headers only.
			stream.ResponseHeader().Set(ErrorHeader, ErrorOutsideRoot)
		}
		return err
	}
	defer w.close()
	if err := stream.Send(&fspb.WatchDirResponse{Event: &fspb.WatchDirResponse_Start{Start: &fspb.WatchDirResponse_StartEvent{}}}); err != nil {
		return err
	}
	var tick <-chan time.Time
	if ka := keepaliveInterval(req.Header()); ka > 0 {
		t := time.NewTicker(ka)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case ev, ok := <-w.events:
			if !ok {
				return connect.NewError(connect.CodeInternal, errors.New("watcher stopped"))
			}
			if err := stream.Send(&fspb.WatchDirResponse{Event: &fspb.WatchDirResponse_Filesystem{Filesystem: ev}}); err != nil {
				return err
			}
		case <-tick:
			if err := stream.Send(&fspb.WatchDirResponse{Event: &fspb.WatchDirResponse_Keepalive{Keepalive: &fspb.WatchDirResponse_KeepAlive{}}}); err != nil {
				return err
			}
		case <-ctx.Done():
			return nil
		}
	}
}

// watchTarget is what a WatchDir or CreateWatcher request watches.
type watchTarget struct {
	u    *User
	conf *confinement // nil unless the request carries RootHeader
	path string       // absolute
}

// watchTarget resolves the request's user, confinement and path.
func (f *fsService) watchTarget(h http.Header, p string) (watchTarget, error) {
	u, conf, err := f.scope(h)
	if err != nil {
		return watchTarget{}, err
	}
	var abs string
	if conf != nil {
		abs, err = conf.abs(p)
	} else {
		abs, err = u.resolvePath(p)
	}
	return watchTarget{u: u, conf: conf, path: abs}, err
}

// start starts watching t.
func (t watchTarget) start(s *Server, recursive, includeEntry, allowNetwork bool) (*dirWatcher, error) {
	if t.conf != nil {
		return s.newConfinedWatcher(t.u, t.conf, t.path, recursive, includeEntry, allowNetwork)
	}
	return s.newDirWatcher(t.u, t.path, recursive, includeEntry, allowNetwork)
}

// pollWatchers holds watchers created with CreateWatcher.
type pollWatchers struct {
	mu sync.Mutex
	m  map[string]*pollWatcher
}

type pollWatcher struct {
	w     *dirWatcher
	idle  *time.Timer
	owner string // user name; only the creator may read or remove it
}

func newPollWatchers() *pollWatchers {
	return &pollWatchers{m: make(map[string]*pollWatcher)}
}

func (pw *pollWatchers) get(id, user string) (*pollWatcher, error) {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	w, ok := pw.m[id]
	if !ok || w.owner != user {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("watcher %q not found", id))
	}
	return w, nil
}

func (pw *pollWatchers) remove(id string) *pollWatcher {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	w := pw.m[id]
	delete(pw.m, id)
	return w
}

// closeAll stops every polling watcher (agent shutdown).
func (pw *pollWatchers) closeAll() {
	pw.mu.Lock()
	ws := pw.m
	pw.m = make(map[string]*pollWatcher)
	pw.mu.Unlock()
	for _, w := range ws {
		w.idle.Stop()
		w.w.close()
	}
}

// CreateWatcher starts a watcher whose events are fetched by polling.
func (f *fsService) CreateWatcher(ctx context.Context, req *connect.Request[fspb.CreateWatcherRequest]) (*connect.Response[fspb.CreateWatcherResponse], error) {
	t, err := f.watchTarget(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	pw := f.s.pollWatchers
	pw.mu.Lock()
	n := len(pw.m)
	pw.mu.Unlock()
	if n >= maxPollWatchers {
		return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("too many watchers (%d); remove some first", n))
	}
	w, err := t.start(f.s, req.Msg.GetRecursive(), req.Msg.GetIncludeEntry(), req.Msg.GetAllowNetworkMounts())
	if err != nil {
		return nil, err
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	entry := &pollWatcher{w: w, owner: t.u.Name}
	entry.idle = time.AfterFunc(pollWatcherIdle, func() {
		if pw.remove(id) != nil {
			w.close()
		}
	})
	pw.mu.Lock()
	pw.m[id] = entry
	pw.mu.Unlock()
	return connect.NewResponse(&fspb.CreateWatcherResponse{WatcherId: id}), nil
}

// GetWatcherEvents returns (and forgets) the events collected since the
// previous call.
func (f *fsService) GetWatcherEvents(ctx context.Context, req *connect.Request[fspb.GetWatcherEventsRequest]) (*connect.Response[fspb.GetWatcherEventsResponse], error) {
	u, err := f.s.resolveUser(basicAuthUser(req.Header()))
	if err != nil {
		return nil, err
	}
	pw, err := f.s.pollWatchers.get(req.Msg.GetWatcherId(), u.Name)
	if err != nil {
		return nil, err
	}
	pw.idle.Reset(pollWatcherIdle)
	var events []*fspb.FilesystemEvent
	for len(events) < watchEventBuffer {
		select {
		case ev, ok := <-pw.w.events:
			if !ok {
				return connect.NewResponse(&fspb.GetWatcherEventsResponse{Events: events}), nil
			}
			events = append(events, ev)
			continue
		default:
		}
		break
	}
	return connect.NewResponse(&fspb.GetWatcherEventsResponse{Events: events}), nil
}

// RemoveWatcher stops a polling watcher.
func (f *fsService) RemoveWatcher(ctx context.Context, req *connect.Request[fspb.RemoveWatcherRequest]) (*connect.Response[fspb.RemoveWatcherResponse], error) {
	u, err := f.s.resolveUser(basicAuthUser(req.Header()))
	if err != nil {
		return nil, err
	}
	if _, err := f.s.pollWatchers.get(req.Msg.GetWatcherId(), u.Name); err != nil {
		return nil, err
	}
	if w := f.s.pollWatchers.remove(req.Msg.GetWatcherId()); w != nil {
		w.idle.Stop()
		w.w.close()
	}
	return connect.NewResponse(&fspb.RemoveWatcherResponse{}), nil
}
