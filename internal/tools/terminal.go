package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/client"
)

// Terminal limits.
const (
	maxTerminals     = 8
	terminalKeep     = 256 << 10 // bytes of output a terminal remembers
	defaultWait      = 2 * time.Second
	quietPeriod      = 300 * time.Millisecond
	screenLines      = 60
	maxTerminalWaitS = 60
)

// terminal is a persistent PTY session and the output it produced.
type terminal struct {
	id     string
	conn   *client.PTYConn
	cancel context.CancelFunc

	mu      sync.Mutex
	out     []byte // last terminalKeep bytes
	total   int64  // bytes ever produced
	read    int64  // bytes the model has seen
	lastOut time.Time
	done    bool
	code    int
	changed chan struct{} // signalled on output or end
}

func (t *terminal) pump() {
	buf := make([]byte, 32<<10)
	for {
		n, err := t.conn.Read(buf)
		t.mu.Lock()
		if n > 0 {
			t.out = append(t.out, buf[:n]...)
			if len(t.out) > terminalKeep {
				t.out = append(t.out[:0:0], t.out[len(t.out)-terminalKeep:]...)
			}
			t.total += int64(n)
			t.lastOut = time.Now()
		}
		if err != nil {
			t.done = true
		}
		t.mu.Unlock()
		select {
		case t.changed <- struct{}{}:
		default:
		}
		if err != nil {
			code, _ := t.conn.Wait()
			t.mu.Lock()
			t.code = code
			t.mu.Unlock()
			return
		}
	}
}

// settle waits until the terminal has been quiet for quietPeriod, has
// ended, or wait has passed.
func (t *terminal) settle(ctx context.Context, wait time.Duration) {
	deadline := time.Now().Add(wait)
	start := time.Now()
	for {
		t.mu.Lock()
		done, last := t.done, t.lastOut
		t.mu.Unlock()
		if done {
			return
		}
		now := time.Now()
		if now.After(deadline) {
			return
		}
		if last.After(start) && now.Sub(last) >= quietPeriod {
			return
		}
		if !last.After(start) && now.Sub(start) >= wait/2 && now.Sub(start) >= quietPeriod {
			// Nothing came at all for a while: the command is waiting.
			return
		}
		timer := time.NewTimer(min(quietPeriod, time.Until(deadline)))
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-t.changed:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// take returns the output the model has not seen (or the last screenLines
// lines with screen), as plain text.
func (t *terminal) take(screen bool) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var text string
	if screen {
		text = plainTerminal(string(t.out))
		lines := strings.Split(text, "\n")
		if len(lines) > screenLines {
			lines = lines[len(lines)-screenLines:]
		}
		text = strings.Join(lines, "\n")
	} else {
		unseen := t.total - t.read
		lost := int64(0)
		if unseen > int64(len(t.out)) {
			lost = unseen - int64(len(t.out))
			unseen = int64(len(t.out))
		}
		text = plainTerminal(string(t.out[int64(len(t.out))-unseen:]))
		if lost > 0 {
			text = fmt.Sprintf("[%d earlier bytes of output were dropped]\n", lost) + text
		}
	}
	t.read = t.total
	text, _ = truncateText(text)
	if t.done {
		text += fmt.Sprintf("\n[the terminal's program ended with exit code %d; close it or start a new one]", t.code)
	}
	return text
}

func (t *terminal) close() {
	_ = t.conn.Close()
	t.cancel()
}

var keys = map[string]string{
	"enter": "\r", "tab": "\t", "escape": "\x1b", "backspace": "\x7f",
	"ctrl-c": "\x03", "ctrl-d": "\x04", "ctrl-z": "\x1a", "ctrl-l": "\x0c", "ctrl-a": "\x01", "ctrl-e": "\x05",
	"up": "\x1b[A", "down": "\x1b[B", "right": "\x1b[C", "left": "\x1b[D",
}

func keyNames() []string {
	var out []string
	for k := range keys {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func terminalTools() []*Tool {
	return []*Tool{{
		Name: "shell_interactive",
		Description: "A persistent interactive terminal (a PTY running bash) for programs that need one: REPLs, prompts, editors, long-running watch processes. " +
			"action=start opens a terminal and returns its id; send types input (followed by Enter unless enter=false) or presses a key, then returns the new output; " +
			"read returns output produced since the last read (screen=true: the last lines of the screen); close ends it; list shows open terminals. " +
			"Escape sequences are stripped from the output. For one-off commands prefer shell_exec.",
		Schema: object(req("action"),
			p("action", enum("What to do.", "start", "send", "read", "close", "list")),
			p("terminal", str("The terminal id returned by start (for send, read, close).")),
			p("input", strMax("Text to type (send).", 100000)),
			p("enter", boolean("Press Enter after input (default true).")),
			p("key", enum("A special key to press (send) instead of or after input.", keyNames()...)),
			p("command", str("Program to run in a new terminal (start; default: bash).")),
			p("cwd", str("Working directory of a new terminal (start; default /workspace).")),
			p("wait", number("Seconds to wait for output to settle before returning (default 2).", 0, maxTerminalWaitS)),
			p("screen", boolean("read: return the last lines of the screen instead of only new output.")),
		),
		run: runTerminal,
	}}
}

func runTerminal(ctx context.Context, s *Session, sb string, raw json.RawMessage) (*Result, error) {
	var a struct {
		Action   string   `json:"action"`
		Terminal string   `json:"terminal"`
		Input    *string  `json:"input"`
		Enter    *bool    `json:"enter"`
		Key      string   `json:"key"`
		Command  string   `json:"command"`
		Cwd      string   `json:"cwd"`
		Wait     *float64 `json:"wait"`
		Screen   bool     `json:"screen"`
	}
	if err := decode(raw, &a); err != nil {
		return nil, err
	}
	wait := defaultWait
	if a.Wait != nil {
		wait = time.Duration(*a.Wait * float64(time.Second))
	}
	st := s.kit.state(s.opts.Owner, sb)
	if a.Action == "list" {
		st.mu.Lock()
		defer st.mu.Unlock()
		if len(st.terminals) == 0 {
			return textResult("No open terminals."), nil
		}
		var ids []string
		for id, t := range st.terminals {
			t.mu.Lock()
			state := "running"
			if t.done {
				state = fmt.Sprintf("ended (exit code %d)", t.code)
			}
			t.mu.Unlock()
			ids = append(ids, id+": "+state)
		}
		sort.Strings(ids)
		return textResult("%s", strings.Join(ids, "\n")), nil
	}
	if a.Action == "start" {
		cwd := workspace
		if a.Cwd != "" {
			var err error
			if cwd, err = s.resolve(ctx, sb, a.Cwd, false); err != nil {
				return nil, err
			}
		}
		st.mu.Lock()
		n := len(st.terminals)
		st.mu.Unlock()
		if n >= maxTerminals {
			return nil, fail("at most %d terminals per sandbox are open; close one first (action=close)", maxTerminals)
		}
		inner := "if command -v bash >/dev/null 2>&1; then exec bash -i; else exec sh -i; fi"
		if a.Command != "" {
			inner = "exec " + a.Command
		}
		cmd := "sh -c " + shellQuote(envPrefix+inner)
		tctx, cancel := context.WithCancel(context.Background())
		conn, err := s.c.PTY(tctx, sb, client.PTYOptions{Cols: 120, Rows: 40, Cmd: cmd, Cwd: cwd})
		if err != nil {
			cancel()
			return nil, err
		}
		t := &terminal{conn: conn, cancel: cancel, changed: make(chan struct{}, 1)}
		st.mu.Lock()
		st.nextTerm++
		t.id = fmt.Sprintf("t%d", st.nextTerm)
		st.terminals[t.id] = t
		st.mu.Unlock()
		go t.pump()
		t.settle(ctx, wait)
		return textResult("Started terminal %s.\n%s", t.id, t.take(false)), nil
	}
	if a.Terminal == "" {
		return nil, fail("give terminal (the id returned by action=start); action=list shows open terminals")
	}
	st.mu.Lock()
	t := st.terminals[a.Terminal]
	if t != nil && a.Action == "close" {
		delete(st.terminals, a.Terminal)
	}
	st.mu.Unlock()
	if t == nil {
		return nil, fail("no terminal %q in this sandbox; action=list shows open terminals, action=start opens one", a.Terminal)
	}
	switch a.Action {
	case "close":
		t.close()
		return textResult("Closed terminal %s.", t.id), nil
	case "read":
		t.settle(ctx, wait)
		return textResult("%s", t.take(a.Screen)), nil
	case "send":
		var in string
		if a.Input != nil {
			in = *a.Input
			if a.Enter == nil || *a.Enter {
				in += "\r"
			}
		}
		if a.Key != "" {
			in += keys[a.Key]
		}
		if in == "" {
			return nil, fail("send needs input or key")
		}
		t.mu.Lock()
		done := t.done
		t.mu.Unlock()
		if done {
			return nil, fail("terminal %s has ended; start a new one", t.id)
		}
		if _, err := t.conn.Write([]byte(in)); err != nil {
			return nil, fail("terminal %s: %v", t.id, err)
		}
		t.settle(ctx, wait)
		return textResult("%s", t.take(a.Screen)), nil
	}
	return nil, fail("unknown action %q", a.Action)
}
