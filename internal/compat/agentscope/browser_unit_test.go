package agentscope

import (
	"reflect"
	"testing"
)

// TestBrowserArgs checks what is dropped from agentscope's calls: null
// anywhere, "" only for the optional strings its client fills with "".
func TestBrowserArgs(t *testing.T) {
	cases := []struct {
		tool string
		in   map[string]any
		want map[string]any
	}{
		{"browser_take_screenshot", map[string]any{"raw": true, "filename": "", "element": "", "ref": ""}, map[string]any{"raw": true}},
		{"browser_wait_for", map[string]any{"time": nil, "text": "x", "textGone": nil}, map[string]any{"text": "x"}},
		{"browser_tab_close", map[string]any{"index": nil}, map[string]any{}},
		{"browser_tab_close", map[string]any{"index": 0.0}, map[string]any{"index": 0.0}},
		// Required strings stay, even empty: the server says what is wrong.
		{"browser_type", map[string]any{"element": "e", "ref": "r", "text": ""}, map[string]any{"element": "e", "ref": "r", "text": ""}},
		{"browser_handle_dialog", map[string]any{"accept": true, "promptText": ""}, map[string]any{"accept": true, "promptText": ""}},
	}
	for _, c := range cases {
		if got := browserArgs(c.tool, c.in); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s %v: got %v, want %v", c.tool, c.in, got, c.want)
		}
	}
}

func TestCoordinate(t *testing.T) {
	if x, y, ok, err := coordinate(map[string]any{"coordinate": []any{10.4, 20.6}}); err != nil || !ok || x != 10 || y != 21 {
		t.Errorf("[10.4, 20.6]: %d %d %v %v", x, y, ok, err)
	}
	if _, _, ok, err := coordinate(map[string]any{}); ok || err != nil {
		t.Errorf("absent: %v %v", ok, err)
	}
	for _, bad := range []any{[]any{1.0}, []any{-1.0, 2.0}, []any{"1", 2.0}, []any{1.0, 40000.0}, "1,2", []any{1.0, 2.0, 3.0}} {
		if _, _, _, err := coordinate(map[string]any{"coordinate": bad}); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

func TestPNGSize(t *testing.T) {
	hdr := []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x05\x00\x00\x00\x03\x20")
	if w, h := pngSize(hdr); w != 1280 || h != 800 {
		t.Errorf("got %dx%d", w, h)
	}
	if w, h := pngSize([]byte("short")); w != 0 || h != 0 {
		t.Errorf("short: %dx%d", w, h)
	}
}
