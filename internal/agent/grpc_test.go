package agent_test

import (
	"context"
	"net"
	"net/http"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/agentbox/agentbox/api/proto/process"
	"github.com/agentbox/agentbox/api/proto/process/processconnect"
	"github.com/agentbox/agentbox/internal/agent/agenttest"
)

// gRPC clients need HTTP/2; the agent serves cleartext HTTP/2 (h2c) on the
// same socket next to HTTP/1.1.
func TestGRPCOverH2C(t *testing.T) {
	a, _ := startAgent(t, agenttest.Options{})
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	tr := &http.Transport{
		Protocols: &protocols,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", a.Socket)
		},
	}
	t.Cleanup(tr.CloseIdleConnections)
	pc := processconnect.NewProcessClient(&http.Client{Transport: tr}, "http://agent", connect.WithGRPC())
	ctx := testCtx(t)
	stream, err := pc.Start(ctx, connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "echo grpc"}}}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	var out string
	var end *pb.ProcessEvent_EndEvent
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		out += string(ev.GetData().GetStdout())
		if ev.GetEnd() != nil {
			end = ev.GetEnd()
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if out != "grpc\n" || end == nil || end.GetExitCode() != 0 {
		t.Errorf("output %q end %v", out, end)
	}
	_, err = pc.SendSignal(ctx, connect.NewRequest(&pb.SendSignalRequest{Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: 999999}}, Signal: pb.Signal_SIGNAL_SIGKILL}))
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("grpc error code: %v", err)
	}
}
