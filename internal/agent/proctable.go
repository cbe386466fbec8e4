package agent

import (
	"fmt"
	"sort"
	"sync"

	"connectrpc.com/connect"

	pb "github.com/agentbox/agentbox/api/proto/process"
)

// procTable tracks running processes by pid. A process is removed as soon
// as its end event has been handed to its subscribers, so nothing about
// exited processes accumulates.
type procTable struct {
	mu    sync.Mutex
	procs map[int]*process
}

func newProcTable() *procTable {
	return &procTable{procs: make(map[int]*process)}
}

func (t *procTable) add(p *process) {
	t.mu.Lock()
	t.procs[p.pid] = p
	t.mu.Unlock()
}

func (t *procTable) remove(p *process) {
	t.mu.Lock()
	if t.procs[p.pid] == p {
		delete(t.procs, p.pid)
	}
	t.mu.Unlock()
}

// find resolves a selector (pid or tag) to a running process. With
// duplicate tags the lowest pid wins, so the answer is stable.
func (t *procTable) find(sel *pb.ProcessSelector) (*process, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch s := sel.GetSelector().(type) {
	case *pb.ProcessSelector_Pid:
		if p, ok := t.procs[int(s.Pid)]; ok {
			return p, nil
		}
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with pid %d not found", s.Pid))
	case *pb.ProcessSelector_Tag:
		var best *process
		for _, p := range t.procs {
			if p.tag != nil && *p.tag == s.Tag && (best == nil || p.pid < best.pid) {
				best = p
			}
		}
		if best == nil {
			return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with tag %q not found", s.Tag))
		}
		return best, nil
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("process selector needs a pid or a tag"))
	}
}

// list returns every tracked process ordered by pid.
func (t *procTable) list() []*process {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*process, 0, len(t.procs))
	for _, p := range t.procs {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].pid < out[j].pid })
	return out
}
