package dataplane

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/agentbox/agentbox/api/proto/process"
	"github.com/agentbox/agentbox/internal/agent/agentclient"
)

// E2B's clients start commands with envd's process.Process/Start, a
// Connect server stream the E2B front end passes to the agent as it is
// (EnvdTarget). So that those commands land in the exec history like
// every other door's, the transport EnvdTarget hands out reads along:
// the command from the request, the start and end events from the
// answer. It changes no byte of either. Terminals (a Start with a PTY)
// are not recorded, as the native terminal's are not.

// envdStartPath ends the path of the RPC that starts a process.
const envdStartPath = "/process.Process/Start"

const (
	// maxStartPeek is the most of a Start request read to find its
	// command: a larger one (a huge environment) passes unrecorded.
	maxStartPeek = 1 << 20
	// maxEventFrame is the largest answer frame decoded: start and end
	// events are small, so a larger frame is output and is only skipped.
	maxEventFrame = 64 << 10
	// maxInflated bounds a compressed frame's decoded size.
	maxInflated = 1 << 20
)

// Envelope flags of the Connect and gRPC(-web) stream framing.
const (
	flagCompressed = 0x01
	flagEndStream  = 0x02 // Connect's end-of-stream message
	flagTrailers   = 0x80 // gRPC-web's trailers
)

// envdRecorder is the transport of EnvdTarget (see above).
type envdRecorder struct {
	r    *Request
	next http.RoundTripper
}

func (t *envdRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodPost || !strings.HasSuffix(req.URL.Path, envdStartPath) || req.Body == nil || req.Body == http.NoBody {
		return t.next.RoundTrip(req)
	}
	json, ok := streamCodec(req.Header.Get("Content-Type"))
	if !ok {
		return t.next.RoundTrip(req)
	}
	head, err := io.ReadAll(io.LimitReader(req.Body, maxStartPeek))
	// What was read goes first, then the rest: the agent gets the body
	// as it came (a RoundTripper leaves the caller's request alone).
	out := req.Clone(req.Context())
	out.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(head), req.Body), req.Body}
	if err != nil {
		return t.next.RoundTrip(out)
	}
	start, ok := decodeStart(head, json, encodingOf(req.Header, "Connect-Content-Encoding"))
	if !ok || start.Pty != nil {
		return t.next.RoundTrip(out)
	}
	cmd := append([]string{start.GetProcess().GetCmd()}, start.GetProcess().GetArgs()...)
	ctx := context.WithoutCancel(req.Context())
	w := &envdWatch{r: t.r, ctx: ctx, cmd: cmd, json: json, began: time.Now()}
	w.beforeOOM, w.beforePids, w.haveStats = t.r.s.sandboxes.LimitCounters(ctx, t.r.id)
	resp, err := t.next.RoundTrip(out)
	if err != nil || resp.StatusCode != http.StatusOK {
		// Refused before it started: not a command run (as a refused
		// Exec is not).
		return resp, err
	}
	w.encoding = encodingOf(resp.Header, "Connect-Content-Encoding")
	w.ReadCloser = resp.Body
	resp.Body = w
	return resp, nil
}

// streamCodec reports whether a stream's content type is JSON (else
// protobuf), and false for a content type that is no stream of Connect,
// gRPC or gRPC-web.
func streamCodec(contentType string) (json, ok bool) {
	ct, _, _ := strings.Cut(strings.ToLower(contentType), ";")
	ct = strings.TrimSpace(ct)
	for _, prefix := range []string{"application/connect+", "application/grpc-web+", "application/grpc+"} {
		if codec, found := strings.CutPrefix(ct, prefix); found {
			return codec == "json", codec == "json" || codec == "proto"
		}
	}
	return false, ct == "application/grpc" || ct == "application/grpc-web"
}

// encodingOf is a stream's message compression: Connect's header, else
// gRPC's.
func encodingOf(h http.Header, connect string) string {
	if e := h.Get(connect); e != "" {
		return strings.ToLower(e)
	}
	return strings.ToLower(h.Get("Grpc-Encoding"))
}

// decodeStart reads the StartRequest of an enveloped request body.
func decodeStart(body []byte, json bool, encoding string) (*pb.StartRequest, bool) {
	if len(body) < 5 {
		return nil, false
	}
	n := binary.BigEndian.Uint32(body[1:5])
	if uint64(len(body)-5) < uint64(n) {
		return nil, false
	}
	msg, ok := inflate(body[0], body[5:5+n], encoding)
	if !ok {
		return nil, false
	}
	var m pb.StartRequest
	if err := unmarshal(msg, json, &m); err != nil || m.GetProcess().GetCmd() == "" {
		return nil, false
	}
	return &m, true
}

// inflate returns a frame's message, decompressed when its flag says so.
func inflate(flags byte, msg []byte, encoding string) ([]byte, bool) {
	if flags&flagCompressed == 0 {
		return msg, true
	}
	if encoding != "gzip" {
		return nil, false
	}
	zr, err := gzip.NewReader(bytes.NewReader(msg))
	if err != nil {
		return nil, false
	}
	out, err := io.ReadAll(io.LimitReader(zr, maxInflated))
	return out, err == nil
}

func unmarshal(msg []byte, json bool, m proto.Message) error {
	if json {
		return protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(msg, m)
	}
	return proto.Unmarshal(msg, m)
}

// envdWatch is the answer of a recorded Start: it passes the stream on
// and follows its frames for the start and end events. The command goes
// into the history when the stream is done (read to its end, broken or
// closed), if it started.
type envdWatch struct {
	io.ReadCloser
	r                     *Request
	ctx                   context.Context
	cmd                   []string
	json                  bool
	encoding              string
	began                 time.Time
	beforeOOM, beforePids int64
	haveStats             bool

	// The frame being read: its header, then its message (kept when it
	// is small enough to be an event we want, else skipped).
	hdr  [5]byte
	nhdr int
	left uint32
	keep bool
	msg  []byte

	started bool
	end     *agentclient.ExitResult
	endAt   time.Time
	once    sync.Once
}

func (w *envdWatch) Read(p []byte) (int, error) {
	n, err := w.ReadCloser.Read(p)
	w.feed(p[:n])
	if err != nil {
		w.finish()
	}
	return n, err
}

func (w *envdWatch) Close() error {
	w.finish()
	return w.ReadCloser.Close()
}

// feed advances the frame reader over b.
func (w *envdWatch) feed(b []byte) {
	for len(b) > 0 {
		if w.nhdr < len(w.hdr) {
			c := copy(w.hdr[w.nhdr:], b)
			w.nhdr += c
			b = b[c:]
			if w.nhdr < len(w.hdr) {
				return
			}
			w.left = binary.BigEndian.Uint32(w.hdr[1:])
			w.keep = w.left <= maxEventFrame && w.hdr[0]&(flagEndStream|flagTrailers) == 0
			w.msg = w.msg[:0]
		}
		c := int(min(uint64(w.left), uint64(len(b))))
		if w.keep {
			w.msg = append(w.msg, b[:c]...)
		}
		w.left -= uint32(c)
		b = b[c:]
		if w.left == 0 {
			if w.keep {
				w.event(w.hdr[0], w.msg)
			}
			w.nhdr = 0
		}
	}
}

// event looks at one message of the answer.
func (w *envdWatch) event(flags byte, msg []byte) {
	if w.end != nil {
		return
	}
	msg, ok := inflate(flags, msg, w.encoding)
	if !ok {
		return
	}
	if w.json && !bytes.Contains(msg, []byte(`"start"`)) && !bytes.Contains(msg, []byte(`"end"`)) {
		return // output (base64, never a quote) or a keepalive
	}
	if !w.json && !maybeLifeEvent(msg) {
		return // output or a keepalive: not worth decoding
	}
	var m pb.StartResponse
	if err := unmarshal(msg, w.json, &m); err != nil {
		return
	}
	switch ev := m.GetEvent().GetEvent().(type) {
	case *pb.ProcessEvent_Start:
		w.started = true
	case *pb.ProcessEvent_End:
		w.end = &agentclient.ExitResult{ExitCode: int(ev.End.GetExitCode()), Exited: ev.End.GetExited(),
			Status: ev.End.GetStatus(), Error: ev.End.GetError()}
		w.endAt = time.Now()
	}
}

// maybeLifeEvent reports whether a protobuf StartResponse may carry a
// start or an end event (ProcessEvent fields 1 and 3), reading only tags,
// so that output frames are not decoded.
func maybeLifeEvent(msg []byte) bool {
	num, typ, n := protowire.ConsumeTag(msg)
	if n < 0 || num != 1 || typ != protowire.BytesType {
		return true // not the usual shape: let the decoder judge
	}
	ev, m := protowire.ConsumeBytes(msg[n:])
	if m < 0 {
		return true
	}
	num, _, n = protowire.ConsumeTag(ev)
	return n < 0 || num == 1 || num == 3
}

// finish records the command once the stream is done.
func (w *envdWatch) finish() {
	w.once.Do(func() {
		if !w.started {
			return // refused in the stream (no such executable): never ran
		}
		if w.end == nil {
			// The client went away or the agent was lost; an E2B
			// process outlives its stream, so it may still run.
			w.r.recordExec(w.began, w.cmd, nil, errStreamCut)
			return
		}
		res := w.r.ended(w.ctx, w.cmd, *w.end, w.endAt.Sub(w.began), w.beforeOOM, w.beforePids, w.haveStats)
		w.r.recordExec(w.began, w.cmd, &res, nil)
	})
}

// errStreamCut is the history's word for a command whose stream ended
// before the command did.
var errStreamCut = streamCutError{}

type streamCutError struct{}

func (streamCutError) Error() string {
	return "the stream ended before the command did (the caller went away or the agent was lost); it may still run"
}
