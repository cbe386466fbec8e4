package codeinterp

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// cell is one execution as a kernel sees it.
type cell struct {
	code string
	// env is set for this execution only and restored afterwards.
	env map[string]string
	// setenv carries changes of the agent's default environment since the
	// interpreter last heard of them (nil value: unset); they persist.
	setenv    map[string]*string
	maxResult int64
}

// cellOutcome is how an execution ended on the interpreter's side.
type cellOutcome struct {
	died bool   // the interpreter exited (or was killed) during the execution
	err  *Event // the last error the interpreter reported, if any
}

// sendTimeout bounds handing a cell to an idle interpreter.
const sendTimeout = 10 * time.Second

// run executes c, streaming its events into s, and returns when the
// interpreter reported the end (and all output up to it was delivered)
// or died. Interrupting is the caller's business (see Context).
func (k *kernel) run(c cell, s *sink) cellOutcome {
	k.seq++
	seq := k.seq
	// A fresh nonce per execution: a process that managed to read one
	// marker off the pipe (see marker.go) learns nothing about the next.
	k.nonce = randomHex(12)
	for _, o := range k.readers {
		o.setNonce(k.nonce)
	}
	k.sink.Store(s)
	defer func() {
		s.close()
		k.sink.Store(nil)
	}()
	if err := k.send(seq, c, s); err != nil {
		k.log.Warn("hand cell to interpreter", "err", err)
		k.kill(killProtocol)
		return k.died(cellOutcome{}, false, s)
	}
	started := k.lang.proto == protoBash
	var out cellOutcome
	for {
		select {
		case m, ok := <-k.events:
			if !ok {
				return k.died(out, started, s)
			}
			if m.Ev == "done" && m.Seq == seq {
				if k.lang.proto == protoBash && m.RC != 0 {
					// E2B's bash kernel: no name, the status as value.
					ev := ErrorEvent("", strconv.Itoa(m.RC), "")
					out.err = &ev
				}
				k.syncOutput()
				return out
			}
			started = k.handle(m, seq, started, &out, s, true)
		case <-k.proc.Done():
			return k.died(out, started, s)
		}
	}
}

// handle processes one event of the running execution and reports
// whether the execution has started. Events before its start are left
// over from an earlier one (a background thread's display) and dropped.
// With ordered set, a result waits until the output written before it
// was delivered: results travel on fd 4 and output on fds 1 and 2, read
// by different goroutines, and clients (E2B's callbacks, Jupyter's
// order) expect print() before the value of the cell's last line.
func (k *kernel) handle(m driverMsg, seq uint64, started bool, out *cellOutcome, s *sink, ordered bool) bool {
	switch m.Ev {
	case "start":
		if m.Seq == seq {
			s.event(CountEvent(m.Count))
			return true
		}
	case "result":
		if started {
			if ordered {
				k.syncOutput()
			}
			s.event(ResultEvent(m.Data, m.Main))
		}
	case "error":
		if started {
			ev := ErrorEvent(m.Name, m.Value, m.Traceback)
			out.err = &ev
		}
	}
	return started
}

// died collects what a dead interpreter still managed to report.
func (k *kernel) died(out cellOutcome, started bool, s *sink) cellOutcome {
	t := time.NewTimer(100 * time.Millisecond)
	defer t.Stop()
drain:
	for {
		select {
		case m, ok := <-k.events:
			if !ok {
				break drain
			}
			started = k.handle(m, k.seq, started, &out, s, false)
		case <-t.C:
			break drain
		}
	}
	// The event pipe can end before the process is reaped, or without it
	// exiting at all (user code closed fd 4): such an interpreter is
	// unusable and gets killed.
	select {
	case <-k.proc.Done():
	case <-time.After(time.Second):
		k.kill(killProtocol)
		select {
		case <-k.proc.Done():
		case <-time.After(5 * time.Second):
		}
	}
	// Without the agent's own write ends the readers reach EOF as soon as
	// no process holds the pipes any more.
	k.pipes.StdoutMark.Close()
	k.pipes.StderrMark.Close()
	k.drainAfterExit()
	out.died = true
	return out
}

// send hands the cell to the interpreter.
func (k *kernel) send(seq uint64, c cell, s *sink) error {
	switch k.lang.proto {
	case protoDriver:
		b, err := json.Marshal(map[string]any{"op": "exec", "seq": seq, "code": c.code, "env": c.env,
			"setenv": c.setenv, "max_result": c.maxResult})
		if err != nil {
			return fmt.Errorf("encode cell: %w", err)
		}
		return writeAll(k.pipes.Control, append(b, '\n'), sendTimeout)
	default:
		k.count++
		s.event(CountEvent(k.count))
		return writeAll(k.pipes.Stdin, []byte(bashCell(c, seq)), sendTimeout)
	}
}
