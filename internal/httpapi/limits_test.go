package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/dataplane"
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// Stdin unescaped in place equals what encoding/json decodes, for every
// kind of escape, and holds no copy of its own.
func TestSecurityInlineStdin(t *testing.T) {
	for _, s := range []string{
		"", "plain", "line\nbreak\ttab\r\b\f", `quote " backslash \ slash /`,
		"control \x00\x01\x1f", "é ü 日本 😀", "<html> & \u2028\u2029",
		strings.Repeat("x\n", 5000),
	} {
		lit, _ := json.Marshal(s)
		// Also with every character escaped the long way.
		var long bytes.Buffer
		long.WriteByte('"')
		for _, r := range s {
			if r > 0xffff {
				hi, lo := (r-0x10000)>>10+0xd800, (r-0x10000)&0x3ff+0xdc00
				long.WriteString(jsonEscape(hi) + jsonEscape(lo))
				continue
			}
			long.WriteString(jsonEscape(r))
		}
		long.WriteByte('"')
		for _, q := range [][]byte{lit, long.Bytes()} {
			body := []byte(`{"cmd":["cat"],"stdin":` + string(q) + `}`)
			var b execBody
			if err := json.Unmarshal(body, &b); err != nil {
				t.Fatalf("%q: %v", q, err)
			}
			if string(b.Stdin) != s {
				t.Errorf("stdin %q decoded to %q", q, b.Stdin)
			}
			if len(b.Stdin) > 0 && &b.Stdin[0] != &body[len(`{"cmd":["cat"],"stdin":"`)] {
				t.Errorf("stdin %q was copied out of the body", q)
			}
		}
	}
	// Lone and broken surrogates become U+FFFD, as with encoding/json.
	for _, q := range []string{`"\ud800"`, `"\udc00x"`, `"\ud800\u0041"`, `"\ud83d\ude00"`} {
		var want string
		_ = json.Unmarshal([]byte(q), &want)
		var got inlineBytes
		if err := got.UnmarshalJSON([]byte(q)); err != nil || string(got) != want {
			t.Errorf("%s: got %q %v, want %q", q, got, err, want)
		}
	}
	var b execBody
	if err := json.Unmarshal([]byte(`{"cmd":["x"],"stdin":null}`), &b); err != nil || b.Stdin != nil {
		t.Errorf("null stdin: %q %v", b.Stdin, err)
	}
	if err := json.Unmarshal([]byte(`{"cmd":["x"],"stdin":5}`), &b); err == nil {
		t.Errorf("numeric stdin accepted")
	}
}

func jsonEscape(r rune) string {
	const hex = "0123456789abcdef"
	return `\u` + string([]byte{hex[r>>12&15], hex[r>>8&15], hex[r>>4&15], hex[r&15]})
}

// The streamed exec answer is byte for byte what encoding/json made of
// the whole result, including output that is not UTF-8 and output longer
// than one encoded piece.
func TestSecurityExecResultJSON(t *testing.T) {
	outputs := [][]byte{
		nil, []byte("hello\n"), []byte("bad \xff\xfe utf8 \xc3"), []byte("<tag> & \u2028 \x00"),
		bytes.Repeat([]byte("é\x01"), jsonPiece),                                          // multi-byte characters across piece borders
		append(bytes.Repeat([]byte("a"), jsonPiece-1), bytes.Repeat([]byte{0xff}, 10)...), // a bad run across a border
	}
	for i, out := range outputs {
		res := &dataplane.BufferedExec{ExecResult: dataplane.ExecResult{ExitCode: 3, Status: "exit status 3",
			TimedOut: true, Duration: 1500 * time.Microsecond}, Stdout: out, Stderr: outputs[len(outputs)-1-i], Truncated: true}
		rec := httptest.NewRecorder()
		if err := writeExecResult(rec, res); err != nil {
			t.Fatal(err)
		}
		var want bytes.Buffer
		_ = json.NewEncoder(&want).Encode(execResultOut{
			ExitCode: res.ExitCode, Stdout: strings.ToValidUTF8(string(res.Stdout), "\uFFFD"),
			Stderr: strings.ToValidUTF8(string(res.Stderr), "\uFFFD"), Status: res.Status,
			TimedOut: res.TimedOut, Truncated: res.Truncated, DurationMS: ms(res.Duration),
		})
		if rec.Body.String() != want.String() {
			t.Errorf("output %d: streamed answer differs:\n got %.300q\nwant %.300q", i, rec.Body.String(), want.String())
		}
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("content type %q", ct)
		}
	}
}

// Large bodies are refused by their declared size before they are read,
// unknown fields are named, and a 429 carries Retry-After.
func TestSecurityLargeBodyDecoding(t *testing.T) {
	decode := func(body string, contentLength int64) error {
		r := httptest.NewRequest("POST", "/", strings.NewReader(body))
		r.ContentLength = contentLength
		r.Header.Set("Content-Type", "application/json")
		var b execBody
		return decodeLargeJSON(httptest.NewRecorder(), r, 100, &b)
	}
	if err := decode(`{"cmd":["x"]}`, 1<<30); sandbox.ClassOf(err) != sandbox.ClassTooLarge {
		t.Errorf("declared oversized body: %v", err)
	}
	if err := decode(strings.Repeat(" ", 200)+`{}`, -1); sandbox.ClassOf(err) != sandbox.ClassTooLarge {
		t.Errorf("oversized body of unknown length: %v", err)
	}
	if err := decode(`{"cmd":["x"],"stdn":"a"}`, -1); err == nil || !strings.Contains(err.Error(), `unknown field "stdn"`) {
		t.Errorf("unknown field: %v", err)
	}
	if err := decode(`{"CMD":["x"]}`, -1); err != nil {
		t.Errorf("field names match case-insensitively, as in encoding/json: %v", err)
	}
	if err := decode(`   `, -1); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("empty body: %v", err)
	}
	if err := decode(`{"cmd":["x"]} {}`, -1); sandbox.ClassOf(err) != sandbox.ClassInvalid {
		t.Errorf("trailing data: %v", err)
	}
	if err := decode(`{"cmd":["x"]`, 13); sandbox.ClassOf(err) != sandbox.ClassInvalid {
		t.Errorf("short body: %v", err)
	}

	m := manager.New(manager.Config{MaxRequestsPerUser: 1}, nil, nil)
	release, err := m.Admit("u", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	_, err = m.Admit("u", 0)
	rec := httptest.NewRecorder()
	writeError(rec, httptest.NewRequest("GET", "/", nil), err)
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" {
		t.Errorf("refusal answered %d, Retry-After %q", rec.Code, rec.Header().Get("Retry-After"))
	}
}
