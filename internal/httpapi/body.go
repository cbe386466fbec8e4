package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// Large inline payloads (exec stdin, code) are read differently from the
// small bodies of decodeJSON: json.Decoder buffers a body in an array it
// grows by doubling and then copies every string out of it, so an 80 MiB
// body cost four to five times its size. Here the body is read once into
// an array of its declared length and decoded from there; stdin is
// unescaped inside that same array.

// decodeLargeJSON reads a JSON object body of at most limit bytes into v,
// a pointer to a struct. Unknown fields and oversized bodies are errors
// naming the problem, as with decodeJSON.
func decodeLargeJSON(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	if err := requireJSON(r); err != nil {
		return err
	}
	data, err := readBody(w, r, limit)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return badRequest("", "request body is empty; a JSON object is required")
	}
	if err := checkFields(data, v); err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		var syntax *json.SyntaxError
		var typeErr *json.UnmarshalTypeError
		switch {
		case errors.As(err, &syntax):
			return badRequest("", "malformed JSON at byte %d: %v", syntax.Offset, err)
		case errors.As(err, &typeErr):
			return badRequest(typeErr.Field, "field %q: want %s, got %s", typeErr.Field, typeErr.Type, typeErr.Value)
		}
		return badRequest("", "invalid JSON: %v", err)
	}
	return nil
}

// readBody reads the whole body, of at most limit bytes.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, sandbox.Errorf(sandbox.ClassTooLarge, "request body is over %d bytes", limit)
	}
	body := http.MaxBytesReader(w, r.Body, limit)
	var data []byte
	var err error
	if r.ContentLength >= 0 {
		// net/http stops the body at its declared length.
		data = make([]byte, r.ContentLength)
		_, err = io.ReadFull(body, data)
	} else {
		data, err = io.ReadAll(body)
	}
	if err == nil {
		return data, nil
	}
	var tooBig *http.MaxBytesError
	var timeout interface{ Timeout() bool }
	switch {
	case errors.As(err, &tooBig):
		return nil, sandbox.Errorf(sandbox.ClassTooLarge, "request body is over %d bytes", limit)
	case errors.As(err, &timeout) && timeout.Timeout():
		return nil, badRequest("", "request body stalled: nothing arrived for too long (BODY_TIMEOUT)")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return nil, badRequest("", "request body ended before its Content-Length")
	}
	return nil, badRequest("", "read request body: %v", err)
}

// checkFields refuses object keys that are not json fields of the struct
// v points to (json.Unmarshal has no DisallowUnknownFields).
func checkFields(data []byte, v any) error {
	var keys map[string]skipValue
	if err := json.Unmarshal(data, &keys); err != nil {
		var syntax *json.SyntaxError
		if errors.As(err, &syntax) {
			return badRequest("", "malformed JSON at byte %d: %v", syntax.Offset, err)
		}
		return badRequest("", "request body must be a JSON object: %v", err)
	}
	known := map[string]bool{}
	t := reflect.TypeOf(v).Elem()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		known[strings.ToLower(name)] = true
	}
	for k := range keys {
		// encoding/json matches names case-insensitively.
		if !known[strings.ToLower(k)] {
			return badRequest(k, "unknown field %q", k)
		}
	}
	return nil
}

// skipValue accepts any JSON value without keeping (or copying) it.
type skipValue struct{}

func (skipValue) UnmarshalJSON([]byte) error { return nil }

// inlineBytes is a JSON string decoded into the body's own array instead
// of a copy. Unescaping never makes a string longer, so it can overwrite
// its own escaped form. Bytes that are not UTF-8 are kept as they are
// (encoding/json would replace each with three bytes of U+FFFD, which no
// longer fits in place).
type inlineBytes []byte

func (b *inlineBytes) UnmarshalJSON(data []byte) error {
	if string(data) == "null" {
		*b = nil
		return nil
	}
	if len(data) < 2 || data[0] != '"' || data[len(data)-1] != '"' {
		return &json.UnmarshalTypeError{Value: "non-string", Type: reflect.TypeFor[string]()}
	}
	*b = unquoteInPlace(data)
	return nil
}

// unquoteInPlace unescapes the JSON string literal q (valid: json.Unmarshal
// checked the whole document before decoding) into q's own array.
func unquoteInPlace(q []byte) []byte {
	in := q[1 : len(q)-1]
	w := 0
	for r := 0; r < len(in); {
		c := in[r]
		if c != '\\' {
			// Copy the run up to the next escape at once.
			n := r + 1
			for n < len(in) && in[n] != '\\' {
				n++
			}
			w += copy(in[w:], in[r:n])
			r = n
			continue
		}
		switch e := in[r+1]; e {
		case 'u':
			ru := hex4(in[r+2 : r+6])
			r += 6
			if utf16.IsSurrogate(ru) {
				if r+6 <= len(in) && in[r] == '\\' && in[r+1] == 'u' {
					if pair := utf16.DecodeRune(ru, hex4(in[r+2:r+6])); pair != utf8.RuneError {
						ru = pair
						r += 6
					} else {
						ru = utf8.RuneError
					}
				} else {
					ru = utf8.RuneError
				}
			}
			w += utf8.EncodeRune(in[w:], ru)
		default:
			in[w] = unescape(e)
			w++
			r += 2
		}
	}
	return in[:w]
}

// unescape maps the letter of a one-character escape to its byte.
func unescape(e byte) byte {
	switch e {
	case 'b':
		return '\b'
	case 'f':
		return '\f'
	case 'n':
		return '\n'
	case 'r':
		return '\r'
	case 't':
		return '\t'
	}
	return e // '"', '\\', '/'
}

func hex4(h []byte) rune {
	var r rune
	for _, c := range h {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		default:
			c = c - 'A' + 10
		}
		r = r<<4 | rune(c)
	}
	return r
}
