package agentclient

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/agentbox/agentbox/api/proto/process"
)

// envelope frames msg the Connect way: flags, big-endian length, message.
func envelope(flags byte, msg []byte) []byte {
	out := make([]byte, 5+len(msg))
	out[0] = flags
	binary.BigEndian.PutUint32(out[1:5], uint32(len(msg)))
	copy(out[5:], msg)
	return out
}

func streamOf(body []byte) *frameStream {
	return &frameStream{body: io.NopCloser(bytes.NewReader(body)), br: bufio.NewReaderSize(bytes.NewReader(body), 64<<10)}
}

// FuzzConnectFrames feeds arbitrary bytes to the Connect stream decoder
// every exec, PTY and watch goes through (the agent's answers are outside
// bytes: a sandbox's agent is code its user controls). It must stop: at
// most one message per 5-byte envelope, then errors or EOF for good; it
// never allocates a frame larger than maxFrame, whatever a header claims.
func FuzzConnectFrames(f *testing.F) {
	start, _ := proto.Marshal(&pb.StartResponse{Event: &pb.ProcessEvent{Event: &pb.ProcessEvent_Start{Start: &pb.ProcessEvent_StartEvent{Pid: 7}}}})
	data, _ := proto.Marshal(&pb.StartResponse{Event: &pb.ProcessEvent{Event: &pb.ProcessEvent_Data{Data: &pb.ProcessEvent_DataEvent{Output: &pb.ProcessEvent_DataEvent_Stdout{Stdout: []byte("hi\n")}}}}})
	f.Add(append(append(envelope(0, start), envelope(0, data)...), envelope(endStreamFlag, []byte(`{}`))...))
	f.Add(envelope(endStreamFlag, []byte(`{"error":{"code":"not_found","message":"no such process"}}`)))
	f.Add(envelope(endStreamFlag, []byte(`{"error":{"code":"bogus"}}`)))
	f.Add(envelope(1, data))                           // compressed: refused
	f.Add([]byte{0, 0xff, 0xff, 0xff, 0xff})           // a 4 GiB claim
	f.Add([]byte{0, 0x01, 0x00, 0x00, 0x01, 1, 2, 3})  // 16 MiB + 1 claimed, 3 sent
	f.Add([]byte{0, 0x00, 0xff, 0xff, 0xff, 1, 2, 3})  // just under maxFrame, 3 sent
	f.Add(envelope(0, []byte{0x0a, 0xff, 0xff, 0x03})) // truncated field
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, body []byte) {
		s := streamOf(body)
		limit := len(body)/5 + 1
		var i int
		for i = 0; i <= limit; i++ {
			var m pb.StartResponse
			err := s.recv(&m)
			if err != nil {
				if !s.done {
					t.Fatalf("error %v but the stream is not finished", err)
				}
				if again := s.recv(&m); !errors.Is(again, io.EOF) {
					t.Fatalf("recv after the end: %v, want io.EOF", again)
				}
				break
			}
		}
		if i > limit {
			t.Fatalf("%d messages from %d bytes", i, len(body))
		}
		if cap(s.buf) > keptFrame {
			t.Fatalf("kept a frame buffer of %d bytes", cap(s.buf))
		}
	})
}

// FuzzConnectRoundTrip frames events the way the agent does and checks the
// decoder gives back exactly what was sent, then a clean end.
func FuzzConnectRoundTrip(f *testing.F) {
	f.Add([]byte("hello"), []byte{}, uint32(1))
	f.Add(bytes.Repeat([]byte{0}, 70<<10), []byte("err"), uint32(0))
	f.Fuzz(func(t *testing.T, out, errOut []byte, pid uint32) {
		events := []*pb.StartResponse{
			{Event: &pb.ProcessEvent{Event: &pb.ProcessEvent_Start{Start: &pb.ProcessEvent_StartEvent{Pid: pid}}}},
			{Event: &pb.ProcessEvent{Event: &pb.ProcessEvent_Data{Data: &pb.ProcessEvent_DataEvent{Output: &pb.ProcessEvent_DataEvent_Stdout{Stdout: out}}}}},
			{Event: &pb.ProcessEvent{Event: &pb.ProcessEvent_Data{Data: &pb.ProcessEvent_DataEvent{Output: &pb.ProcessEvent_DataEvent_Stderr{Stderr: errOut}}}}},
		}
		var body []byte
		for _, e := range events {
			b, err := proto.Marshal(e)
			if err != nil {
				t.Fatal(err)
			}
			body = append(body, envelope(0, b)...)
		}
		body = append(body, envelope(endStreamFlag, []byte(`{}`))...)
		s := streamOf(body)
		for i, want := range events {
			var got pb.StartResponse
			if err := s.recv(&got); err != nil {
				t.Fatalf("message %d: %v", i, err)
			}
			if !proto.Equal(&got, want) {
				t.Fatalf("message %d: got %v, want %v", i, &got, want)
			}
		}
		var m pb.StartResponse
		if err := s.recv(&m); !errors.Is(err, io.EOF) {
			t.Fatalf("after the last message: %v, want io.EOF", err)
		}
	})
}
