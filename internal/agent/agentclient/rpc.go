package agentclient

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
)

// The hot calls (Start, Connect, unary RPCs, WatchDir) use this minimal
// Connect-protocol client instead of connect-go's: a request body with a
// known length avoids connect-go's pipe goroutine and chunked encoding,
// which measured ~200µs per call (about 15% of an exec round trip) on
// the development host. Only the binary codec and uncompressed messages
// are spoken; the agent is connect-go, so the wire format is fixed by the
// Connect protocol specification.

const (
	endStreamFlag = 0x02
	// maxFrame bounds one message (data events are at most 32 KiB).
	maxFrame = 16 << 20
)

// connectError is the JSON error of the Connect protocol.
type connectError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *connectError) toError(status int) error {
	var code connect.Code
	if e.Code == "" || code.UnmarshalText([]byte(e.Code)) != nil {
		return fmt.Errorf("HTTP %d: %s", status, e.Message)
	}
	return connect.NewError(code, errors.New(e.Message))
}

// post sends one Connect request and returns the response if it is 200.
func (c *Client) post(ctx context.Context, procedure, contentType, user string, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.baseURL+procedure, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("Connect-Protocol-Version", "1")
	c.setHeaders(req.Header, user)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusOK {
		return resp, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var ce connectError
	if json.Unmarshal(b, &ce) == nil && ce.Code != "" {
		return nil, qualify(resp.Header.Get(errorHeader), ce.toError(resp.StatusCode))
	}
	// Not a Connect error (a proxy, an unknown route): classify by status.
	return nil, statusError(procedure, &http.Response{StatusCode: resp.StatusCode, Status: resp.Status, Body: io.NopCloser(bytes.NewReader(b))})
}

// unary calls a unary procedure with the binary codec.
func (c *Client) unary(ctx context.Context, procedure, user string, req, resp proto.Message) error {
	body, err := proto.Marshal(req)
	if err != nil {
		return fmt.Errorf("marshal request: %w", err)
	}
	hr, err := c.post(ctx, procedure, "application/proto", user, body)
	if err != nil {
		return err
	}
	defer hr.Body.Close()
	b, err := io.ReadAll(io.LimitReader(hr.Body, maxFrame))
	if err != nil {
		return fmt.Errorf("read response: %w", err)
	}
	if err := proto.Unmarshal(b, resp); err != nil {
		return fmt.Errorf("unmarshal response: %w", err)
	}
	return nil
}

// frameStream reads the enveloped messages of a server stream.
type frameStream struct {
	body io.ReadCloser
	br   *bufio.Reader
	buf  []byte // reused for messages of up to keptFrame bytes
	// frameBuf is buf's array when it came from frameBufs.
	frameBuf *[keptFrame]byte
	done     bool
}

// serverStream opens a server-streaming call.
func (c *Client) serverStream(ctx context.Context, procedure, user string, req proto.Message) (*frameStream, error) {
	msg, err := proto.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("marshal request: %w", err)
	}
	body := make([]byte, 5+len(msg))
	binary.BigEndian.PutUint32(body[1:5], uint32(len(msg)))
	copy(body[5:], msg)
	hr, err := c.post(ctx, procedure, "application/connect+proto", user, body) //nolint:bodyclose // the frameStream owns the body and closes it
	if err != nil {
		return nil, err
	}
	br := streamReaders.Get().(*bufio.Reader)
	br.Reset(hr.Body)
	return &frameStream{body: hr.Body, br: br}, nil
}

// A stream's read buffer and frame buffer (64 KiB each) were two thirds of
// what an `exec true` allocated in the daemon, and the garbage collector's
// work grew with them: a stream read to its end hands them back for the
// next one. A stream closed earlier leaves them to the collector.
const streamBuf = 64 << 10

var (
	streamReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, streamBuf) }}
	frameBufs     = sync.Pool{New: func() any { return new([keptFrame]byte) }}
)

// release returns the stream's buffers to their pools. Only recv calls it,
// once the stream is done: nothing reads them afterwards.
func (s *frameStream) release() {
	if s.br != nil && s.br.Size() == streamBuf {
		s.br.Reset(nil)
		streamReaders.Put(s.br)
	}
	if s.frameBuf != nil {
		frameBufs.Put(s.frameBuf)
	}
	s.br, s.buf, s.frameBuf = nil, nil, nil
}

// recv decodes the next message into msg. It returns io.EOF after a clean
// end of stream and the stream's error (a *connect.Error) otherwise.
func (s *frameStream) recv(msg proto.Message) error {
	if s.done {
		return io.EOF
	}
	err := s.recvFrame(msg)
	if s.done {
		s.release()
	}
	return err
}

// recvFrame is recv of a stream not yet done.
func (s *frameStream) recvFrame(msg proto.Message) error {
	var hdr [5]byte
	if _, err := io.ReadFull(s.br, hdr[:]); err != nil {
		s.done = true
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF // the end-of-stream frame is mandatory
		}
		return fmt.Errorf("read stream: %w", err)
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > maxFrame {
		s.done = true
		return fmt.Errorf("stream message of %d bytes exceeds %d", n, maxFrame)
	}
	buf := s.frame(int(n))
	if _, err := io.ReadFull(s.br, buf); err != nil {
		s.done = true
		return fmt.Errorf("read stream: %w", err)
	}
	if hdr[0]&endStreamFlag != 0 {
		s.done = true
		// Consume the rest of the body (the chunked terminator) so the
		// transport sees EOF and returns the connection to the pool.
		_, _ = io.Copy(io.Discard, io.LimitReader(s.br, 64<<10))
		var end struct {
			Error    *connectError `json:"error"`
			Metadata http.Header   `json:"metadata"`
		}
		if err := json.Unmarshal(buf, &end); err != nil {
			return fmt.Errorf("decode end of stream: %w", err)
		}
		if end.Error != nil {
			return qualify(metadataValue(end.Metadata, errorHeader), end.Error.toError(http.StatusOK))
		}
		return io.EOF
	}
	if hdr[0] != 0 {
		s.done = true
		return fmt.Errorf("unsupported stream frame flags %#x (compressed?)", hdr[0])
	}
	if err := proto.Unmarshal(buf, msg); err != nil {
		// A message that does not parse ends the stream: what follows
		// would be read out of its context (found by FuzzConnectFrames).
		s.done = true
		return fmt.Errorf("unmarshal stream message: %w", err)
	}
	return nil
}

// keptFrame is the largest frame buffer a stream keeps for the next
// message (output events are at most 32 KiB).
const keptFrame = 64 << 10

// frame returns a buffer for a message of n bytes. Decoding copies every
// field out of it, so one buffer serves the whole stream: a large exec
// then makes one copy of its output, not two.
func (s *frameStream) frame(n int) []byte {
	if n > keptFrame {
		return make([]byte, n)
	}
	if cap(s.buf) < n {
		s.frameBuf = frameBufs.Get().(*[keptFrame]byte)
		s.buf = s.frameBuf[:]
	}
	return s.buf[:n]
}

// close ends the stream. A stream read to its end leaves the connection
// reusable; closing earlier tears the connection down (which is how the
// agent learns that the client left).
func (s *frameStream) close() error {
	return s.body.Close()
}

// metadataValue is the first value of key in end-of-stream metadata,
// whose keys are not necessarily canonical.
func metadataValue(md http.Header, key string) string {
	for k, v := range md {
		if strings.EqualFold(k, key) && len(v) > 0 {
			return v[0]
		}
	}
	return ""
}
