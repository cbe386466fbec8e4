package agentclient_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/agent/agenttest"
)

// TestStreamBuffersReused runs commands one after another and side by
// side, each printing output of its own (up to two full frames), and checks
// that every caller gets exactly its own bytes: the streams' read and
// frame buffers are handed from a finished stream to the next one.
func TestStreamBuffersReused(t *testing.T) {
	a := agenttest.Start(t, agenttest.Options{})
	c := a.Client(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run := func(i int) error {
		// i distinct bytes repeated to a size that varies with i: small
		// messages after large ones find a buffer with stale bytes in it.
		size := []int{1, 100, 40 << 10, 70 << 10, 3}[i%5]
		want := bytes.Repeat([]byte{byte('a' + i%26)}, size)
		var out, errb bytes.Buffer
		res, err := c.Run(ctx, agentclient.StartOptions{Cmd: "/bin/sh",
			Args: []string{"-c", fmt.Sprintf("head -c %d /dev/zero | tr '\\0' '%c'; echo err%d >&2", size, 'a'+i%26, i)}},
			nil, &out, &errb)
		if err != nil {
			return fmt.Errorf("run %d: %w", i, err)
		}
		if res.ExitCode != 0 || !bytes.Equal(out.Bytes(), want) || errb.String() != fmt.Sprintf("err%d\n", i) {
			return fmt.Errorf("run %d: exit %d, %d bytes of stdout (want %d of %q), stderr %q",
				i, res.ExitCode, out.Len(), size, want[0], errb.String())
		}
		return nil
	}
	for i := range 20 {
		if err := run(i); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < 40; i += 4 {
				if err := run(i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
