// Package computer runs screen actions (screenshots, mouse, keyboard) on a
// sandbox's X display: the native API's POST /v1/sandboxes/{id}/computer,
// agentscope's computer tool and the MCP kit's screenshot share it.
//
// Actions run inside the sandbox as its processes (the image's user, the
// sandbox's limits): arguments are validated and passed to xdotool as a
// fixed argument list, never through a shell; screenshots come from the
// template's agentbox-screenshot (templates/browser).
package computer

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/agentbox/agentbox/internal/dataplane"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// Timeout bounds one action inside the sandbox.
const Timeout = 30 * time.Second

// MaxTypeText bounds the text of one "type" action: xdotool types it key by
// key, about 80 characters a second.
const MaxTypeText = 2000

// MaxCoordinate bounds coordinates (X's own limit is 32767).
const MaxCoordinate = 32767

// Action is one screen action (the body of POST /v1/sandboxes/{id}/computer).
type Action struct {
	Action    string `json:"action"`
	X         *int   `json:"x"`
	Y         *int   `json:"y"`
	ToX       *int   `json:"to_x"`
	ToY       *int   `json:"to_y"`
	Button    string `json:"button"`
	Direction string `json:"direction"`
	Amount    int    `json:"amount"`
	Text      string `json:"text"`
	Keys      string `json:"keys"`
}

// Result is what an action answers: PNG for a screenshot, X and Y for
// cursor_position, Width and Height for screen_size.
type Result struct {
	PNG           []byte
	X, Y          int
	Width, Height int
}

// keyPattern is one xdotool key combination: keysym names joined by "+"
// ("ctrl+l", "Return", "shift+Tab", "F5").
var keyPattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_]{1,32}(\+[A-Za-z0-9_]{1,32}){0,4}$`) })

var buttons = map[string]string{"": "1", "left": "1", "middle": "2", "right": "3"}

var scrollButtons = map[string]string{"up": "4", "down": "5", "left": "6", "right": "7"}

// invalid is a bad argument: an invalid-class error naming the field, as
// the API's 400s do.
func invalid(field, format string, args ...any) error {
	return sandbox.Invalid(field, format, args...)
}

func point(name string, x, y *int) ([]string, error) {
	if x == nil || y == nil {
		return nil, invalid(name, "%s needs both coordinates", name)
	}
	if *x < 0 || *y < 0 || *x > MaxCoordinate || *y > MaxCoordinate {
		return nil, invalid(name, "coordinates must be 0-%d", MaxCoordinate)
	}
	return []string{"mousemove", strconv.Itoa(*x), strconv.Itoa(*y)}, nil
}

// optionalPoint is a mousemove to x,y if given, else nothing (act where
// the pointer is).
func optionalPoint(a Action) ([]string, error) {
	if a.X == nil && a.Y == nil {
		return nil, nil
	}
	mv, err := point("x", a.X, a.Y)
	if err != nil {
		return nil, err
	}
	// Let the move land before the button acts on it.
	return append(mv, "sleep", "0.05"), nil
}

// XdotoolArgs translates an action other than screenshot into xdotool's
// argument list. Every value is validated, so no argument can be read as
// an option.
func XdotoolArgs(a Action) ([]string, error) {
	switch a.Action {
	case "move":
		return point("x", a.X, a.Y)
	case "click", "double_click":
		b, ok := buttons[a.Button]
		if !ok {
			return nil, invalid("button", "button must be left, middle or right")
		}
		args, err := optionalPoint(a)
		if err != nil {
			return nil, err
		}
		if a.Action == "double_click" {
			return append(args, "click", "--repeat", "2", "--delay", "80", b), nil
		}
		return append(args, "click", b), nil
	case "drag":
		from, err := point("x", a.X, a.Y)
		if err != nil {
			return nil, err
		}
		to, err := point("to_x", a.ToX, a.ToY)
		if err != nil {
			return nil, err
		}
		args := append(from, "sleep", "0.05", "mousedown", "1", "sleep", "0.05")
		args = append(args, to...)
		return append(args, "sleep", "0.05", "mouseup", "1"), nil
	case "scroll":
		dir := a.Direction
		if dir == "" {
			dir = "down"
		}
		b, ok := scrollButtons[dir]
		if !ok {
			return nil, invalid("direction", "direction must be up, down, left or right")
		}
		n := a.Amount
		if n == 0 {
			n = 3
		}
		if n < 1 || n > 100 {
			return nil, invalid("amount", "amount must be 1-100 (scroll wheel clicks)")
		}
		args, err := optionalPoint(a)
		if err != nil {
			return nil, err
		}
		return append(args, "click", "--repeat", strconv.Itoa(n), "--delay", "20", b), nil
	case "type":
		if a.Text == "" {
			return nil, invalid("text", "type needs text")
		}
		if !utf8.ValidString(a.Text) || strings.ContainsRune(a.Text, 0) {
			return nil, invalid("text", "text must be valid UTF-8 without NUL")
		}
		if n := utf8.RuneCountInString(a.Text); n > MaxTypeText {
			return nil, invalid("text", "text must be at most %d characters (got %d): send it in parts", MaxTypeText, n)
		}
		return []string{"type", "--delay", "12", "--", a.Text}, nil
	case "key":
		combos := strings.Fields(a.Keys)
		if len(combos) == 0 || len(combos) > 20 {
			return nil, invalid("keys", "keys must be 1-20 key combinations separated by spaces, e.g. \"ctrl+l\" or \"Return\"")
		}
		for _, k := range combos {
			if !keyPattern().MatchString(k) {
				return nil, invalid("keys", "%q is not a key combination: X keysym names joined by +, e.g. ctrl+shift+Tab, Return, a", k)
			}
		}
		return append([]string{"key", "--delay", "50", "--"}, combos...), nil
	case "cursor_position":
		return []string{"getmouselocation", "--shell"}, nil
	case "screen_size":
		return []string{"getdisplaygeometry"}, nil
	}
	return nil, invalid("action", "unknown action %q: screenshot, click, double_click, move, drag, scroll, type, key, cursor_position or screen_size", a.Action)
}

// Execer runs a command in a sandbox and buffers its output (a data-plane
// request on it).
type Execer interface {
	Sandbox() sandbox.ID
	ExecBuffered(ctx context.Context, req dataplane.ExecRequest) (*dataplane.BufferedExec, error)
}

// Do runs action a on the display of x's sandbox. A sandbox without a
// desktop is a conflict-class error; bad arguments are invalid-class.
func Do(ctx context.Context, x Execer, a Action) (Result, error) {
	id := x.Sandbox()
	cmd := []string{"agentbox-screenshot"}
	if a.Action != "screenshot" {
		args, err := XdotoolArgs(a)
		if err != nil {
			return Result{}, err
		}
		cmd = append([]string{"xdotool"}, args...)
	}
	noDesktop := sandbox.Errorf(sandbox.ClassConflict, "sandbox %s has no desktop (%s not found): create it from the browser template (docs/browser.md)", id, cmd[0])
	res, err := x.ExecBuffered(ctx, dataplane.ExecRequest{Cmd: cmd, Timeout: Timeout})
	if err != nil {
		if errors.Is(err, dataplane.ErrExecutableNotFound) {
			return Result{}, noDesktop
		}
		return Result{}, err
	}
	if res.ExitCode != 0 || res.Truncated {
		msg := strings.TrimSpace(string(res.Stderr))
		if len(msg) > 500 {
			msg = msg[:500]
		}
		if res.ExitCode == 127 {
			return Result{}, noDesktop
		}
		return Result{}, sandbox.Errorf(sandbox.ClassUnavailable, "%s %s failed in sandbox %s (exit %d, status %s): %s", cmd[0], a.Action, id, res.ExitCode, res.Status, msg)
	}
	out := string(res.Stdout)
	var r Result
	switch a.Action {
	case "screenshot":
		if !strings.HasPrefix(out, "\x89PNG\r\n\x1a\n") {
			return Result{}, sandbox.Errorf(sandbox.ClassUnavailable, "agentbox-screenshot in sandbox %s wrote no PNG", id)
		}
		r.PNG = res.Stdout
	case "cursor_position":
		for _, line := range strings.Fields(out) {
			k, v, _ := strings.Cut(line, "=")
			switch k {
			case "X":
				r.X, _ = strconv.Atoi(v)
			case "Y":
				r.Y, _ = strconv.Atoi(v)
			}
		}
	case "screen_size":
		if _, err := fmt.Sscan(out, &r.Width, &r.Height); err != nil {
			return Result{}, sandbox.Errorf(sandbox.ClassUnavailable, "screen size of sandbox %s: unexpected %q", id, out)
		}
	}
	return r, nil
}
