package computer

import (
	"slices"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/sandbox"
)

func ip(n int) *int { return &n }

// TestXdotoolArgs checks the translation of /computer actions to xdotool's
// argument lists, and that hostile values are refused before anything runs
// (no value can become an option or a second command).
func TestXdotoolArgs(t *testing.T) {
	good := []struct {
		a    Action
		want string
	}{
		{Action{Action: "move", X: ip(10), Y: ip(20)}, "mousemove 10 20"},
		{Action{Action: "click"}, "click 1"},
		{Action{Action: "click", X: ip(1), Y: ip(2), Button: "right"}, "mousemove 1 2 sleep 0.05 click 3"},
		{Action{Action: "double_click", X: ip(1), Y: ip(2)}, "mousemove 1 2 sleep 0.05 click --repeat 2 --delay 80 1"},
		{Action{Action: "drag", X: ip(1), Y: ip(2), ToX: ip(3), ToY: ip(4)}, "mousemove 1 2 sleep 0.05 mousedown 1 sleep 0.05 mousemove 3 4 sleep 0.05 mouseup 1"},
		{Action{Action: "scroll"}, "click --repeat 3 --delay 20 5"},
		{Action{Action: "scroll", Direction: "up", Amount: 7, X: ip(5), Y: ip(6)}, "mousemove 5 6 sleep 0.05 click --repeat 7 --delay 20 4"},
		{Action{Action: "type", Text: "--help; rm -rf /"}, "type --delay 12 -- --help; rm -rf /"},
		{Action{Action: "key", Keys: "ctrl+l  Return"}, "key --delay 50 -- ctrl+l Return"},
		{Action{Action: "cursor_position"}, "getmouselocation --shell"},
		{Action{Action: "screen_size"}, "getdisplaygeometry"},
	}
	for _, c := range good {
		got, err := XdotoolArgs(c.a)
		if err != nil || strings.Join(got, " ") != c.want {
			t.Errorf("%+v: %q %v, want %q", c.a, got, err, c.want)
		}
	}
	// A typed text is one argument after "--", whatever it holds.
	if got, _ := XdotoolArgs(Action{Action: "type", Text: "a b\nc"}); !slices.Equal(got, []string{"type", "--delay", "12", "--", "a b\nc"}) {
		t.Errorf("type: %q", got)
	}
	bad := []Action{
		{Action: ""},
		{Action: "screenshot"}, // not an xdotool action
		{Action: "exec"},
		{Action: "move"},
		{Action: "move", X: ip(1)},
		{Action: "move", X: ip(-1), Y: ip(1)},
		{Action: "move", X: ip(1), Y: ip(40000)},
		{Action: "click", X: ip(1)},
		{Action: "click", Button: "4"},
		{Action: "click", Button: "--version"},
		{Action: "drag", X: ip(1), Y: ip(1)},
		{Action: "drag", ToX: ip(1), ToY: ip(1)},
		{Action: "scroll", Direction: "in"},
		{Action: "scroll", Amount: -1},
		{Action: "scroll", Amount: 101},
		{Action: "type"},
		{Action: "type", Text: "a\x00b"},
		{Action: "type", Text: "\xff"},
		{Action: "type", Text: strings.Repeat("é", MaxTypeText+1)},
		{Action: "key"},
		{Action: "key", Keys: "   "},
		{Action: "key", Keys: "--help"},
		{Action: "key", Keys: "ctrl+"},
		{Action: "key", Keys: "a;b"},
		{Action: "key", Keys: "exec:sh"},
		{Action: "key", Keys: strings.Repeat("a ", 21)},
		{Action: "key", Keys: strings.Repeat("x", 33)},
	}
	for _, a := range bad {
		if got, err := XdotoolArgs(a); sandbox.ClassOf(err) != sandbox.ClassInvalid {
			t.Errorf("%+v: %q %v, want invalid_argument", a, got, err)
		}
	}
	// The largest text allowed passes.
	if _, err := XdotoolArgs(Action{Action: "type", Text: strings.Repeat("é", MaxTypeText)}); err != nil {
		t.Errorf("text of %d characters: %v", MaxTypeText, err)
	}
}
