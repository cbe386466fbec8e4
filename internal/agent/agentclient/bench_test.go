package agentclient_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/agent/agenttest"
	"github.com/agentbox/agentbox/internal/testutil"
)

// TestMain fails the package's run when a test leaves a goroutine behind
// (and removes the agent binary agenttest built).
func TestMain(m *testing.M) { testutil.VerifyMainAfter(m, agenttest.Cleanup) }

// BenchmarkExecTrue measures the round trip of starting `true` and
// receiving its end event through the client: what `exec` costs the
// daemon. It reports the median next to the mean.
func BenchmarkExecTrue(b *testing.B) {
	a := agenttest.Start(b, agenttest.Options{LogLevel: "warn"})
	c := a.Client(b, "")
	ctx := context.Background()
	opts := agentclient.StartOptions{Cmd: "/bin/true"}
	if _, err := c.Run(ctx, opts, nil, nil, nil); err != nil { // warm the connection
		b.Fatal(err)
	}
	durs := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		p, err := c.Start(ctx, opts)
		if err != nil {
			b.Fatal(err)
		}
		res, err := p.Wait()
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("%+v %v", res, err)
		}
		durs = append(durs, time.Since(t0))
	}
	b.StopTimer()
	slices.Sort(durs)
	b.ReportMetric(float64(durs[len(durs)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(durs[len(durs)*99/100].Nanoseconds()), "p99-ns")
}

// zeroReader yields n zero bytes.
type zeroReader struct{ n int64 }

func (z *zeroReader) Read(p []byte) (int, error) {
	if z.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > z.n {
		p = p[:z.n]
	}
	clear(p)
	z.n -= int64(len(p))
	return len(p), nil
}

const transferSize = 32 << 20

func BenchmarkUpload(b *testing.B) {
	a := agenttest.Start(b, agenttest.Options{LogLevel: "warn"})
	c := a.Client(b, "")
	p := filepath.Join(a.Workdir, "upload.bin")
	b.SetBytes(transferSize)
	for b.Loop() {
		if _, err := c.Upload(context.Background(), p, "", &zeroReader{transferSize}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDownload(b *testing.B) {
	a := agenttest.Start(b, agenttest.Options{LogLevel: "warn"})
	c := a.Client(b, "")
	p := filepath.Join(a.Workdir, "download.bin")
	f, err := os.Create(p)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(f, &zeroReader{transferSize}); err != nil {
		b.Fatal(err)
	}
	f.Close()
	b.SetBytes(transferSize)
	for b.Loop() {
		rc, _, err := c.Download(context.Background(), p, "")
		if err != nil {
			b.Fatal(err)
		}
		if n, err := io.Copy(io.Discard, rc); err != nil || n != transferSize {
			b.Fatalf("%d %v", n, err)
		}
		rc.Close()
	}
}
