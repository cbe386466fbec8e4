package httpbody

import (
	"bytes"
	"errors"
	"net/http"
)

// maxAnswer bounds what an Answer keeps: the answers it is for (a delete,
// a release) are a few bytes, and a replica that sends more is not
// allowed to grow the caller's memory.
const maxAnswer = 64 << 10

// Answer is the ResponseWriter of a request a daemon makes to another
// replica on a caller's behalf and reads itself (not streamed back).
// A body past 64 KiB fails the write.
type Answer struct {
	header http.Header
	Status int // 0 until written
	Body   bytes.Buffer
}

// NewAnswer returns an empty Answer.
func NewAnswer() *Answer { return &Answer{header: http.Header{}} }

func (a *Answer) Header() http.Header { return a.header }

func (a *Answer) WriteHeader(code int) {
	if a.Status == 0 {
		a.Status = code
	}
}

func (a *Answer) Write(p []byte) (int, error) {
	if a.Status == 0 {
		a.Status = http.StatusOK
	}
	if a.Body.Len()+len(p) > maxAnswer {
		return 0, errors.New("answer too large")
	}
	return a.Body.Write(p)
}

// FirstLine is the start of the body (its first line, at most 200
// bytes), for an error message.
func (a *Answer) FirstLine() string {
	b := a.Body.Bytes()
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		b = b[:i]
	}
	if len(b) > 200 {
		b = b[:200]
	}
	return string(b)
}
