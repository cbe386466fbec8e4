package dataplane

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	pb "github.com/agentbox/agentbox/api/proto/process"
)

// frame envelopes m as the Connect and gRPC stream framing does,
// compressed with gzip when zip is set.
func frame(t *testing.T, m proto.Message, json, zip bool, flags byte) []byte {
	t.Helper()
	var msg []byte
	var err error
	if json {
		msg, err = protojson.Marshal(m)
	} else {
		msg, err = proto.Marshal(m)
	}
	if err != nil {
		t.Fatal(err)
	}
	if zip {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		zw.Write(msg)
		zw.Close()
		msg, flags = b.Bytes(), flags|flagCompressed
	}
	out := make([]byte, 5, 5+len(msg))
	out[0] = flags
	binary.BigEndian.PutUint32(out[1:], uint32(len(msg)))
	return append(out, msg...)
}

func startEvent() *pb.StartResponse {
	return &pb.StartResponse{Event: &pb.ProcessEvent{Event: &pb.ProcessEvent_Start{Start: &pb.ProcessEvent_StartEvent{Pid: 42}}}}
}

func dataEvent(n int) *pb.StartResponse {
	return &pb.StartResponse{Event: &pb.ProcessEvent{Event: &pb.ProcessEvent_Data{Data: &pb.ProcessEvent_DataEvent{
		Output: &pb.ProcessEvent_DataEvent_Stdout{Stdout: bytes.Repeat([]byte("x"), n)}}}}}
}

func endEvent(code int32) *pb.StartResponse {
	return &pb.StartResponse{Event: &pb.ProcessEvent{Event: &pb.ProcessEvent_End{End: &pb.ProcessEvent_EndEvent{
		ExitCode: code, Exited: true, Status: "exit status 7"}}}}
}

// TestEnvdWatchRecords: the answer of a Start, read one byte at a time,
// in either codec, compressed or not, with output frames small and large
// between the events, records the command with the end event's exit code;
// the bytes pass unchanged.
func TestEnvdWatchRecords(t *testing.T) {
	for _, c := range []struct {
		name      string
		json, zip bool
	}{{"proto", false, false}, {"json", true, false}, {"proto gzip", false, true}, {"json gzip", true, true}} {
		t.Run(c.name, func(t *testing.T) {
			var stream []byte
			for _, m := range []*pb.StartResponse{startEvent(), dataEvent(10), dataEvent(maxEventFrame + 1), {Event: &pb.ProcessEvent{Event: &pb.ProcessEvent_Keepalive{}}}, endEvent(7)} {
				stream = append(stream, frame(t, m, c.json, c.zip, 0)...)
			}
			stream = append(stream, 2, 0, 0, 0, 2, '{', '}') // Connect's end of stream
			s := New(Config{}, nil, nil)
			r := &Request{s: s, owner: "alice", id: "sb1"}
			w := &envdWatch{r: r, cmd: []string{"sh", "-c", "exit 7"}, json: c.json, ctx: t.Context()}
			if c.zip {
				w.encoding = "gzip"
			}
			w.ReadCloser = io.NopCloser(iotest.OneByteReader(bytes.NewReader(stream)))
			var got bytes.Buffer
			if _, err := io.Copy(&got, w); err != nil {
				t.Fatal(err)
			}
			w.Close()
			if !bytes.Equal(got.Bytes(), stream) {
				t.Fatal("the stream was changed on its way")
			}
			recs := s.execs.get("sb1")
			if len(recs) != 1 || recs[0].ExitCode != 7 || recs[0].Cmd != "sh -c exit 7" || recs[0].User != "alice" || recs[0].Error != "" || recs[0].Status != "exit status 7" {
				t.Fatalf("history %+v", recs)
			}
		})
	}
}

// TestEnvdWatchCutOrRefused: a stream cut after the start records the
// command with an error; one that never started (refused in the stream)
// records nothing.
func TestEnvdWatchCutOrRefused(t *testing.T) {
	s := New(Config{}, nil, nil)
	r := &Request{s: s, owner: "alice", id: "sb1"}
	cut := &envdWatch{r: r, cmd: []string{"sleep", "100"}, ctx: t.Context()}
	cut.ReadCloser = io.NopCloser(bytes.NewReader(frame(t, startEvent(), false, false, 0)))
	io.Copy(io.Discard, cut)
	cut.Close()
	refused := &envdWatch{r: r, cmd: []string{"nosuch"}, ctx: t.Context()}
	refused.ReadCloser = io.NopCloser(strings.NewReader("\x02\x00\x00\x00\x1f{\"error\":{\"code\":\"not_found\"}}"))
	io.Copy(io.Discard, refused)
	refused.Close()
	recs := s.execs.get("sb1")
	if len(recs) != 1 || recs[0].Cmd != "sleep 100" || recs[0].ExitCode != -1 || !strings.Contains(recs[0].Error, "stream ended") {
		t.Fatalf("history %+v", recs)
	}
}

func TestDecodeStart(t *testing.T) {
	req := &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "python3", Args: []string{"-c", "print(1)"}}}
	for _, json := range []bool{false, true} {
		for _, zip := range []bool{false, true} {
			enc := ""
			if zip {
				enc = "gzip"
			}
			m, ok := decodeStart(frame(t, req, json, zip, 0), json, enc)
			if !ok || m.GetProcess().GetCmd() != "python3" || len(m.GetProcess().GetArgs()) != 2 {
				t.Fatalf("json %v zip %v: %v %v", json, zip, m, ok)
			}
		}
	}
	if _, ok := decodeStart([]byte{0, 0, 0, 1}, false, ""); ok {
		t.Fatal("a short body decoded")
	}
	if _, ok := decodeStart(frame(t, req, false, true, 0), false, "br"); ok {
		t.Fatal("a frame of an unknown compression decoded")
	}
	for ct, want := range map[string][2]bool{
		"application/connect+json": {true, true}, "application/connect+proto": {false, true},
		"application/grpc": {false, true}, "application/grpc-web+proto": {false, true},
		"application/proto": {false, false}, "application/json": {false, false},
	} {
		if json, ok := streamCodec(ct); json != want[0] || ok != want[1] {
			t.Errorf("%s: json %v ok %v", ct, json, ok)
		}
	}
}
