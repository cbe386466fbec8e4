package agentscope

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"

	"github.com/agentbox/agentbox/internal/computer"
)

// agentscope's gui sandbox type: GuiSandbox.computer_use calls the tool
// "computer" of computer-use-mcp (in agentscope's gui image), with its
// names, schema and result texts. Here it runs on the sandbox's display
// through the same machinery as POST /v1/sandboxes/{id}/computer
// (internal/computer: xdotool and agentbox-screenshot inside the sandbox).

const groupGUI = "gui"

var computerActions = []any{
	"key", "type", "mouse_move", "left_click", "left_click_drag", "right_click",
	"middle_click", "double_click", "get_screenshot", "get_cursor_position",
}

var guiTools = []toolSpec{{
	Name: "computer",
	Description: "Use a mouse and keyboard to interact with a computer, and take screenshots.\n" +
		"* This is an interface to a desktop GUI. You do not have access to a terminal or applications menu. You must click on desktop icons to start applications.\n" +
		"* Always prefer using keyboard shortcuts rather than clicking, where possible.\n" +
		"* Some applications may take time to start or process actions, so you may need to wait and take successive screenshots to see the results of your actions.\n" +
		"* Whenever you intend to move the cursor to click on an element like an icon, you should consult a screenshot to determine the coordinates of the element before moving the cursor.\n" +
		"* Make sure to click any buttons, links, icons, etc with the cursor tip in the center of the element.",
	Parameters: map[string]any{
		"type": "object",
		"properties": map[string]any{
			"action": map[string]any{"type": "string", "enum": computerActions,
				"description": "The action to perform: key (press a key or combination, xdotool syntax: \"Return\", \"ctrl+s\"), type (type text), get_cursor_position, mouse_move (to coordinate), left_click, right_click, middle_click, double_click (at coordinate if given, else where the cursor is), left_click_drag (from the cursor to coordinate), get_screenshot."},
			"coordinate": map[string]any{"type": "array", "minItems": 2, "maxItems": 2,
				"items":       []any{map[string]any{"type": "number"}, map[string]any{"type": "number"}},
				"description": "(x, y): The x (pixels from the left edge) and y (pixels from the top edge) coordinates"},
			"text": map[string]any{"type": "string", "description": "Text to type or key command to execute"},
		},
		"required": []string{"action"},
	},
}}

// hasGUITools reports whether sandboxes of type typ have the computer tool.
func hasGUITools(typ string) bool { return typ == "gui" }

// callGUITool runs the computer tool on r's display. ok is false when
// name is not a gui tool of r.
func (s *Server) callGUITool(ctx context.Context, r *record, name string, args map[string]any) (map[string]any, bool) {
	if !hasGUITools(r.Type) || name != "computer" {
		return nil, false
	}
	return s.runComputer(ctx, r, args), true
}

// coordinate reads the optional [x, y] argument (numbers, rounded to
// pixels). given is false when it is absent.
func coordinate(args map[string]any) (x, y int, given bool, err error) {
	v, ok := args["coordinate"]
	if !ok || v == nil {
		return 0, 0, false, nil
	}
	list, ok := v.([]any)
	if !ok || len(list) != 2 {
		return 0, 0, false, fmt.Errorf("coordinate must be [x, y]")
	}
	var xy [2]int
	for i, c := range list {
		f, ok := c.(float64)
		if !ok || math.IsNaN(f) || f < 0 || f > computer.MaxCoordinate {
			return 0, 0, false, fmt.Errorf("coordinate must be two numbers from 0 to %d", computer.MaxCoordinate)
		}
		xy[i] = int(math.Round(f))
	}
	return xy[0], xy[1], true, nil
}

func (s *Server) runComputer(ctx context.Context, r *record, args map[string]any) map[string]any {
	action, err := argString(args, "action")
	if err != nil {
		return toolError("%v", err)
	}
	text, _ := args["text"].(string)
	x, y, hasXY, err := coordinate(args)
	if err != nil {
		return toolError("%v", err)
	}
	dr, done, err := s.work(ctx, r)
	if err != nil {
		return toolError("%s", errorText(err))
	}
	defer done()
	do := func(a computer.Action) (computer.Result, error) {
		return computer.Do(ctx, dr, a)
	}
	at := func(a computer.Action) computer.Action {
		if hasXY {
			a.X, a.Y = &x, &y
		}
		return a
	}
	needXY := func() error {
		if !hasXY {
			return fmt.Errorf("Coordinate required for %s", action)
		}
		return nil
	}
	var msg string
	switch action {
	case "key":
		if text == "" {
			return toolError("Text required for key")
		}
		_, err = do(computer.Action{Action: "key", Keys: text})
		msg = "Pressed key: " + text
	case "type":
		if text == "" {
			return toolError("Text required for type")
		}
		_, err = do(computer.Action{Action: "type", Text: text})
		msg = "Typed text: " + text
	case "get_cursor_position":
		var res computer.Result
		if res, err = do(computer.Action{Action: "cursor_position"}); err == nil {
			raw, _ := json.Marshal(map[string]int{"x": res.X, "y": res.Y})
			msg = string(raw)
		}
	case "mouse_move":
		if err = needXY(); err == nil {
			_, err = do(at(computer.Action{Action: "move"}))
			msg = fmt.Sprintf("Moved cursor to: (%d, %d)", x, y)
		}
	case "left_click", "right_click", "middle_click":
		button := map[string]string{"left_click": "left", "right_click": "right", "middle_click": "middle"}[action]
		_, err = do(at(computer.Action{Action: "click", Button: button}))
		msg = map[string]string{"left": "Left clicked", "right": "Right clicked", "middle": "Middle clicked"}[button]
	case "double_click":
		_, err = do(at(computer.Action{Action: "double_click"}))
		msg = "Double clicked"
	case "left_click_drag":
		if err = needXY(); err != nil {
			break
		}
		var from computer.Result
		if from, err = do(computer.Action{Action: "cursor_position"}); err != nil {
			break
		}
		_, err = do(computer.Action{Action: "drag", X: &from.X, Y: &from.Y, ToX: &x, ToY: &y})
		msg = fmt.Sprintf("Dragged to: (%d, %d)", x, y)
	case "get_screenshot":
		var res computer.Result
		if res, err = do(computer.Action{Action: "screenshot"}); err != nil {
			break
		}
		w, h := pngSize(res.PNG)
		raw, _ := json.Marshal(map[string]int{"display_width_px": w, "display_height_px": h})
		return toolResult(false, textContent(string(raw)), imageContent(res.PNG, "image/png"))
	default:
		return toolError("Unknown action: %s (one of key, type, mouse_move, left_click, left_click_drag, right_click, middle_click, double_click, get_screenshot, get_cursor_position)", action)
	}
	if err != nil {
		return toolError("%v", err)
	}
	return toolResult(false, textContent(msg))
}

// imageContent is MCP image content: base64 data and its MIME type.
func imageContent(data []byte, mime string) map[string]any {
	return map[string]any{"type": "image", "data": base64.StdEncoding.EncodeToString(data), "mimeType": mime, "annotations": nil}
}

// pngSize reads a PNG's width and height from its IHDR chunk (0, 0 when
// it is too short to have one).
func pngSize(png []byte) (int, int) {
	if len(png) < 24 {
		return 0, 0
	}
	return int(binary.BigEndian.Uint32(png[16:20])), int(binary.BigEndian.Uint32(png[20:24]))
}
