package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/term"

	"github.com/agentbox/agentbox/internal/units"
)

// progressMeter prints "\r<done> [/ <total> (p%)]  <rate>/s" on a
// terminal while a transfer runs, starting only once it has taken longer
// than delay, so quick copies print nothing.
type progressMeter struct {
	w            io.Writer
	total        int64 // -1 when unknown
	start        time.Time
	delay, every time.Duration
	n            atomic.Int64
	stop         chan struct{}
	done         chan struct{}
	once         sync.Once
	printed      bool // only touched by the loop goroutine, then by finish after done
}

// startProgress starts a meter on w when enabled (else returns a meter
// that only counts).
func startProgress(w io.Writer, total int64, enabled bool, delay, every time.Duration) *progressMeter {
	p := &progressMeter{w: w, total: total, start: time.Now(), delay: delay, every: every,
		stop: make(chan struct{}), done: make(chan struct{})}
	if !enabled {
		close(p.done)
		return p
	}
	go p.loop()
	return p
}

// set records the bytes transferred so far; safe from any goroutine.
func (p *progressMeter) set(n int64) { p.n.Store(n) }

func (p *progressMeter) loop() {
	defer close(p.done)
	select {
	case <-time.After(p.delay):
	case <-p.stop:
		return
	}
	t := time.NewTicker(p.every)
	defer t.Stop()
	for {
		p.print()
		select {
		case <-t.C:
		case <-p.stop:
			return
		}
	}
}

func (p *progressMeter) print() {
	p.printed = true
	fmt.Fprintf(p.w, "\r\033[K%s", p.line(p.n.Load(), time.Since(p.start)))
}

// line formats the progress for n bytes after elapsed.
func (p *progressMeter) line(n int64, elapsed time.Duration) string {
	s := units.FormatBytes(n)
	if p.total > 0 {
		s += fmt.Sprintf(" / %s (%d%%)", units.FormatBytes(p.total), n*100/p.total)
	}
	if secs := elapsed.Seconds(); secs > 0 {
		s += fmt.Sprintf("  %s/s", units.FormatBytes(int64(float64(n)/secs)))
	}
	return s
}

// finish stops the meter; if it printed anything, it prints the final
// count and ends the line.
func (p *progressMeter) finish() {
	p.once.Do(func() { close(p.stop) })
	<-p.done
	if p.printed {
		p.print()
		fmt.Fprintln(p.w)
	}
}

// isTerminal reports whether w is a terminal.
func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
