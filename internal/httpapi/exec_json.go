package httpapi

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/agentbox/agentbox/internal/dataplane"
)

// writeExecResult answers a buffered exec with the execResultOut JSON,
// encoding the output streams piece by piece straight to the connection.
// Building the document first (string conversions, then encoding/json's
// growing buffer, up to six bytes per output byte) cost several times the
// output per request; this costs a 64 KiB buffer (reused).
func writeExecResult(w http.ResponseWriter, res *dataplane.BufferedExec) error {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	bw := execWriters.Get().(*bufio.Writer)
	bw.Reset(w)
	defer func() {
		bw.Reset(nil) // no reference to this response stays in the pool
		execWriters.Put(bw)
	}()
	bw.WriteString(`{"exit_code":`)
	bw.WriteString(strconv.Itoa(res.ExitCode))
	bw.WriteString(`,"stdout":`)
	if err := writeJSONText(bw, res.Stdout); err != nil {
		return err
	}
	bw.WriteString(`,"stderr":`)
	if err := writeJSONText(bw, res.Stderr); err != nil {
		return err
	}
	rest, err := json.Marshal(execResultTail{
		Status: res.Status, TimedOut: res.TimedOut, OOMKilled: res.OOMKilled, PidsLimitHit: res.PidsLimitHit,
		Truncated: res.Truncated, DurationMS: ms(res.Duration),
	})
	if err != nil {
		return err
	}
	bw.WriteByte(',')
	bw.Write(rest[1:]) // the tail's fields, without its opening brace
	bw.WriteByte('\n')
	return bw.Flush()
}

// execWriters keeps writeExecResult's buffers: allocated per request,
// they were a third of the bytes an `exec true` allocated in the daemon.
var execWriters = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 64<<10) }}

// execResultTail is the part of execResultOut after the output streams.
type execResultTail struct {
	Status       string  `json:"status"`
	TimedOut     bool    `json:"timed_out"`
	OOMKilled    bool    `json:"oom_killed"`
	PidsLimitHit bool    `json:"pids_limit_hit"`
	Truncated    bool    `json:"truncated"`
	DurationMS   float64 `json:"duration_ms"`
}

// jsonPiece is how much output is encoded at a time.
const jsonPiece = 32 << 10

// writeJSONText writes b as a JSON string, invalid UTF-8 replaced as
// strings.ToValidUTF8 does (one U+FFFD per run of bad bytes). Pieces are
// cut before a valid character, so a run of bad bytes is not split between
// two pieces (except in long binary stretches, which then get one U+FFFD
// more).
func writeJSONText(bw *bufio.Writer, b []byte) error {
	bw.WriteByte('"')
	for len(b) > 0 {
		n := pieceEnd(b)
		enc, err := json.Marshal(strings.ToValidUTF8(string(b[:n]), "\uFFFD"))
		if err != nil {
			return err
		}
		if _, err := bw.Write(enc[1 : len(enc)-1]); err != nil {
			return err
		}
		b = b[n:]
	}
	return bw.WriteByte('"')
}

// pieceEnd returns where to cut the next piece of b: after about
// jsonPiece bytes, at the start of a valid character.
func pieceEnd(b []byte) int {
	if len(b) <= jsonPiece {
		return len(b)
	}
	for i := jsonPiece; i < min(len(b), jsonPiece+64); i++ {
		if r, size := utf8.DecodeRune(b[i:]); r != utf8.RuneError || size > 1 {
			return i
		}
	}
	return min(len(b), jsonPiece+64)
}
