package codeinterp

import (
	"bytes"
	"strconv"
)

// A marker ends an execution's output on fds 1 and 2:
//
//	RS <nonce> ':' <seq> RS
//
// where RS is 0x1e and nonce is random per execution. Once the agent has
// seen it on a stream, it has seen all of that stream's output of the
// execution.
//
// Only the agent knows the nonce and only the agent writes markers. Every
// process of the sandbox can write to the interpreter's stdout and stderr
// (its children inherit them: that is how their output is captured), so
// whoever knows the nonce can end an execution's output early and hide
// text from it. The nonce used to be handed to the interpreter on its
// command line (readable by any process through /proc/<pid>/cmdline) and
// the driver wrote the markers; a process left running by an earlier
// execution could read it and forge the end of later ones. Now the agent
// keeps a write end of both pipes (Pipes.StdoutMark, Pipes.StderrMark)
// and appends the marker itself once the interpreter reported done on
// fd 4, which it does after flushing its output: the pipe keeps the order.
// The nonce lives only in the agent's memory (a non-dumpable process the
// sandbox cannot read), never in the interpreter's argv, environment,
// files or memory. A process of the same user can still open the pipe
// itself through /proc/<interpreter>/fd/1 and read (steal) output,
// markers included, so every execution gets a fresh nonce: a marker read
// off the pipe is worthless for the next execution.
//
// What the interpreter reports (results, errors, done) travels on fd 4,
// which the drivers make close-on-exec and bash closes for user commands:
// other processes cannot write there. Code running inside the interpreter
// itself (a cell and the threads it starts) is the interpreter and can
// write anything the driver can; no framing can tell them apart, and it
// can only ever affect its own context's executions.
const markerSep = 0x1e

// maxMarkerTail bounds how far past the nonce a marker may extend (the
// sequence number); anything longer is ordinary output.
const maxMarkerTail = 24

func markerPrefix(nonce string) []byte {
	return append(append([]byte{markerSep}, nonce...), ':')
}

// markerBytes renders the marker of execution seq.
func markerBytes(nonce string, seq uint64) []byte {
	b := markerPrefix(nonce)
	b = strconv.AppendUint(b, seq, 10)
	return append(b, markerSep)
}

// markerScanner splits a byte stream into output and markers. Bytes that
// might begin a marker are held back until the next feed decides.
type markerScanner struct {
	prefix  []byte
	pending []byte
}

func newMarkerScanner(nonce string) *markerScanner {
	return &markerScanner{prefix: markerPrefix(nonce)}
}

// feed consumes p, calling data for output (the slice is only valid
// during the call) and mark for each marker, in stream order.
func (m *markerScanner) feed(p []byte, data func([]byte), mark func(seq uint64)) {
	m.pending = append(m.pending, p...)
	buf := m.pending
	for len(buf) > 0 {
		i := bytes.Index(buf, m.prefix)
		if i < 0 {
			keep := partialPrefix(buf, m.prefix)
			if n := len(buf) - keep; n > 0 {
				data(buf[:n])
			}
			buf = buf[len(buf)-keep:]
			break
		}
		if i > 0 {
			data(buf[:i])
		}
		rest := buf[i+len(m.prefix):]
		j := bytes.IndexByte(rest, markerSep)
		if j < 0 && len(rest) <= maxMarkerTail {
			buf = buf[i:] // an incomplete marker: wait for more
			break
		}
		seq, err := uint64(0), error(nil)
		if j >= 0 {
			seq, err = strconv.ParseUint(string(rest[:j]), 10, 64)
		}
		if j < 0 || err != nil {
			// Looked like a marker but is not one: plain output.
			data(buf[i : i+len(m.prefix)])
			buf = rest
			continue
		}
		mark(seq)
		buf = rest[j+1:]
	}
	// Keep the undecided tail for the next feed (copy handles overlap).
	n := copy(m.pending, buf)
	m.pending = m.pending[:n]
}

// partialPrefix returns the length of the longest suffix of b that is a
// proper prefix of prefix.
func partialPrefix(b, prefix []byte) int {
	for n := min(len(prefix)-1, len(b)); n > 0; n-- {
		if bytes.Equal(b[len(b)-n:], prefix[:n]) {
			return n
		}
	}
	return 0
}
