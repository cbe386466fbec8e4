package codeinterp

import (
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"testing"
)

func TestMarkerScannerSplitsAnywhere(t *testing.T) {
	const nonce = "abc123"
	stream := "hello " + string(markerBytes(nonce, 7)) + "\x1e not a marker \x1eabc12x" + string(markerBytes(nonce, 8)) + "tail\x1e"
	// Feed the stream cut at every position: the result must not depend on
	// where reads end.
	for cut := 0; cut <= len(stream); cut++ {
		m := newMarkerScanner(nonce)
		var out strings.Builder
		var marks []uint64
		data := func(p []byte) { out.Write(p) }
		mark := func(seq uint64) { marks = append(marks, seq) }
		m.feed([]byte(stream[:cut]), data, mark)
		m.feed([]byte(stream[cut:]), data, mark)
		// A trailing RS may start a marker: it is held until more comes.
		m.feed([]byte("!"), data, mark)
		if got, want := out.String(), "hello \x1e not a marker \x1eabc12xtail\x1e!"; got != want {
			t.Fatalf("cut %d: output %q, want %q", cut, got, want)
		}
		if len(marks) != 2 || marks[0] != 7 || marks[1] != 8 {
			t.Fatalf("cut %d: marks %v", cut, marks)
		}
	}
}

func TestMarkerScannerRejectsBadSequence(t *testing.T) {
	m := newMarkerScanner("n")
	var out strings.Builder
	m.feed([]byte("\x1en:12a\x1eok"), func(p []byte) { out.Write(p) }, func(uint64) { t.Fatal("not a marker") })
	if out.String() != "\x1en:12a\x1eok" {
		t.Fatalf("got %q", out.String())
	}
}

func collectSink(limit int64) (*sink, *[]Event) {
	var evs []Event
	s := newSink(func(ev Event) error { evs = append(evs, ev); return nil }, limit, 100, nil)
	return s, &evs
}

func TestSinkHoldsOutputUntilCountAndCaps(t *testing.T) {
	s, evs := collectSink(10)
	s.output(streamStdout, []byte("early"))
	s.event(CountEvent(1))
	s.output(streamStdout, []byte("0123456789"))
	s.output(streamStdout, []byte("more"))
	s.close()
	s.output(streamStdout, []byte("late"))
	s.finish(EndEvent())
	var types, texts []string
	for _, ev := range *evs {
		types = append(types, ev.Type)
		if ev.Text != nil {
			texts = append(texts, *ev.Text)
		}
	}
	if strings.Join(types, ",") != "number_of_executions,stdout,stdout,stderr,end_of_execution" {
		t.Fatalf("types %v", types)
	}
	if texts[0] != "early" || texts[1] != "01234" || !strings.Contains(texts[2], "exceeded 10 bytes") {
		t.Fatalf("texts %q", texts)
	}
}

func TestSinkKeepsUTF8Whole(t *testing.T) {
	s, evs := collectSink(1 << 20)
	s.event(CountEvent(1))
	euro := []byte("€") // 3 bytes
	s.output(streamStdout, append([]byte("a"), euro[:1]...))
	s.output(streamStdout, euro[1:])
	s.output(streamStdout, []byte{0xff, 'b'})
	s.close()
	var got string
	for _, ev := range (*evs)[1:] {
		got += *ev.Text
	}
	if got != "a€\uFFFDb" {
		t.Fatalf("got %q", got)
	}
}

func TestSinkResultBudgetAndFailure(t *testing.T) {
	s, evs := collectSink(1 << 20)
	s.event(CountEvent(1))
	big := strings.Repeat("x", 200)
	s.event(ResultEvent(map[string]json.RawMessage{"text/plain": json.RawMessage(`"` + big + `"`)}, true))
	if last := (*evs)[len(*evs)-1]; last.Type != TypeStderr || !strings.Contains(*last.Text, "dropped") {
		t.Fatalf("oversized result not reported: %+v", last)
	}

	failed := make(chan struct{})
	f := newSink(func(Event) error { return errors.New("client gone") }, 10, 10, func() { close(failed) })
	f.event(CountEvent(1))
	<-failed
}

func TestResultEventFormats(t *testing.T) {
	bundle := map[string]json.RawMessage{
		"text/plain":       json.RawMessage(`"'quoted'"`),
		"text/html":        json.RawMessage(`"<b>x</b>"`),
		"image/png":        json.RawMessage(`"iVBOR"`),
		"application/json": json.RawMessage(`{"a":1}`),
		"e2b/data":         json.RawMessage(`{"col":[1]}`),
		"text/x-custom":    json.RawMessage(`"c"`),
	}
	b, err := json.Marshal(ResultEvent(bundle, true))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	if m["type"] != "result" || m["is_main_result"] != true || m["text"] != "quoted" || m["html"] != "<b>x</b>" ||
		m["png"] != "iVBOR" || m["json"].(map[string]any)["a"] != float64(1) || m["data"] == nil ||
		m["extra"].(map[string]any)["text/x-custom"] != "c" {
		t.Fatalf("result %s", b)
	}
	for _, absent := range []string{"svg", "markdown", "name", "timestamp"} {
		if _, ok := m[absent]; ok {
			t.Fatalf("%s present in %s", absent, b)
		}
	}
	// Errors carry all three fields even when empty (bash's error).
	b, _ = json.Marshal(ErrorEvent("", "1", ""))
	if string(b) != `{"type":"error","name":"","value":"1","traceback":""}` {
		t.Fatalf("error %s", b)
	}
}

func TestNormalizeLanguage(t *testing.T) {
	for in, want := range map[string]string{"": "python", "Python3": "python", "js": "javascript", " bash ": "bash"} {
		l, err := normalizeLanguage(in)
		if err != nil || l.name != want {
			t.Fatalf("%q: %v %v", in, l, err)
		}
	}
	if _, err := normalizeLanguage("cobol"); KindOf(err) != KindInvalid {
		t.Fatalf("cobol: %v", err)
	}
}

// TestBashCellScript runs the generated script in a real bash: the code
// (quotes, a fake delimiter, $ signs) arrives verbatim, per-execution
// variables are restored and the done line comes out.
func TestBashCellScript(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash not installed")
	}
	code := "echo \"$A '$B'\"; echo '__AGENTBOX_EOF_x $HOME'; false"
	one := "1"
	script := "exec 4>&1\nexport A=keep\n" +
		bashCell(cell{code: code, env: map[string]string{"A": "tmp'q"}, setenv: map[string]*string{"B": &one}}, 3) +
		"echo \"after=$A\"\n"
	out, err := exec.Command(bash, "--noprofile", "--norc", "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("bash: %v\n%s", err, out)
	}
	want := "tmp'q '1'\n__AGENTBOX_EOF_x $HOME\n{\"ev\":\"done\",\"seq\":3,\"rc\":1}\nafter=keep\n"
	if string(out) != want {
		t.Fatalf("output\n%q\nwant\n%q", out, want)
	}
}
