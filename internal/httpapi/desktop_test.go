package httpapi

import (
	"strings"
	"testing"
	"time"
)

func TestRecordArgs(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	args, err := recordArgs(recordRequest{Action: "start"}, now)
	if err != nil || strings.Join(args, " ") != "agentbox-record start /workspace/recordings/recording-20260102-030405.mp4 600 10 536870912" {
		t.Fatalf("defaults: %q %v", args, err)
	}
	args, err = recordArgs(recordRequest{Action: "start", Name: "demo.mp4", MaxSeconds: 5, FPS: 30, MaxBytes: 1 << 20}, now)
	if err != nil || strings.Join(args, " ") != "agentbox-record start /workspace/recordings/demo.mp4 5 30 1048576" {
		t.Fatalf("explicit: %q %v", args, err)
	}
	for _, bad := range []recordRequest{
		{}, {Action: "pause"}, {Action: "start", Name: "../x"}, {Action: "start", Name: "-y"},
		{Action: "start", Name: "a b"}, {Action: "start", Name: strings.Repeat("a", 65)},
		{Action: "start", MaxSeconds: -1}, {Action: "start", MaxSeconds: 3601}, {Action: "start", FPS: 31},
		{Action: "start", MaxBytes: 1000}, {Action: "start", MaxBytes: 5 << 30}, {Action: "stop", Name: "x"},
	} {
		if args, err := recordArgs(bad, now); err == nil {
			t.Errorf("%+v: accepted as %q", bad, args)
		}
	}
}

// The recorder's output comes from the sandbox: only well-formed values
// inside the recordings directory come through.
func TestParseRecordState(t *testing.T) {
	st := parseRecordState("recording=1\nfile=/workspace/recordings/a.mp4\nstarted=1700000000\nmax_seconds=60\nbytes=1234\n")
	if st["recording"] != true || st["path"] != "/workspace/recordings/a.mp4" || st["bytes"] != int64(1234) || st["max_seconds"] != 60 ||
		st["started_at"] != time.Unix(1700000000, 0).UTC() {
		t.Fatalf("state: %v", st)
	}
	st = parseRecordState("recording=yes\nfile=/etc/shadow\nstarted=-5\nbytes=lots\nerror=" + strings.Repeat("x", 1000) + "\ngarbage")
	if st["recording"] != false || st["path"] != nil || st["started_at"] != nil || st["bytes"] != nil || len(st["error"].(string)) != 300 {
		t.Fatalf("hostile state: %v", st)
	}
}
