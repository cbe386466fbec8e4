package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/testutil"
)

// BenchmarkTemplates measures image templates against the host template
// in one daemon, side by side (docs/benchmarks.md):
//   - create + exec `true` + delete through the API, alternating host and
//     image sandboxes so both see the same machine load;
//   - a pull of a new image (every layer downloaded and unpacked: the
//     previous one is deleted and collected) and the first create after it;
//   - the data dir's disk use for 100 live sandboxes of one template.
//
// It needs a built daemon (AGENTBOX_BIN, see the Makefile):
//
//	go test -run '^$' -bench Templates -benchtime 50x ./test/e2e/
func BenchmarkTemplates(b *testing.B) {
	tr := newTokenRegistry(b)
	tr.push(b, "bench/app:v1", runnableImage(b, "bench"))
	dataDir := testutil.ShortTempDir(b)
	// 100 sandboxes of 1 GiB disks (sparse): let them add up past the free space.
	base := startBenchDaemon(b, tr.authSetting(), "AGENTBOX_DATA_DIR="+dataDir, "MAX_SANDBOX_INSTANCES=0",
		"MAX_SANDBOXES_PER_USER=0", "DISK_OVERCOMMIT=20")
	api := benchAPI{b: b, url: base}
	api.do("POST", "/v1/templates/pulls", map[string]any{"image": tr.host + "/bench/app:v1", "name": "bench:v1"})

	b.Run("create-exec-delete", func(b *testing.B) {
		var host, image []time.Duration
		for i := 0; i < b.N; i++ {
			host = append(host, api.cycle("host"))
			image = append(image, api.cycle("bench:v1"))
		}
		hp, ip := quantileMs(host, 0.5), quantileMs(image, 0.5)
		b.ReportMetric(hp, "host-p50-ms")
		b.ReportMetric(quantileMs(host, 0.99), "host-p99-ms")
		b.ReportMetric(ip, "image-p50-ms")
		b.ReportMetric(quantileMs(image, 0.99), "image-p99-ms")
		b.ReportMetric(ip/hp, "image/host")
	})

	b.Run("pull-then-first-create", func(b *testing.B) {
		var pulls, firsts []time.Duration
		for i := 0; i < b.N; i++ {
			ref := fmt.Sprintf("bench/fresh:%d", i)
			tr.push(b, ref, uniqueImage(b, fmt.Sprintf("fresh-%d", i)))
			start := time.Now()
			api.do("POST", "/v1/templates/pulls", map[string]any{"image": tr.host + "/" + ref, "name": "fresh:1"})
			pulls = append(pulls, time.Since(start))
			firsts = append(firsts, api.cycle("fresh:1"))
			// Deleted and collected: the next pull downloads and unpacks
			// everything again.
			api.do("DELETE", "/v1/templates/fresh:1", nil)
		}
		b.ReportMetric(quantileMs(pulls, 0.5), "pull-p50-ms")
		b.ReportMetric(quantileMs(firsts, 0.5), "first-create-p50-ms")
	})

	const count = 100
	var done bool
	var perImage, perHost, store float64
	b.Run("disk-100-sandboxes", func(b *testing.B) {
		if !done {
			done = true
			store = float64(duBytes(b, filepath.Join(dataDir, "templates"))) / (1 << 20)
			perImage = api.diskPerSandbox(dataDir, "bench:v1", count)
			perHost = api.diskPerSandbox(dataDir, "host", count)
		}
		for b.Loop() {
		}
		b.ReportMetric(perImage, "image-MiB/sandbox")
		b.ReportMetric(perHost, "host-MiB/sandbox")
		b.ReportMetric(store, "template-store-MiB")
	})
}

// benchAPI is a bare HTTP client of a benchmark's daemon.
type benchAPI struct {
	b   *testing.B
	url string
}

func (a benchAPI) do(method, path string, body any) []byte {
	var rd io.Reader
	if body != nil {
		data, _ := json.Marshal(body)
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, a.url+path, rd)
	if err != nil {
		a.b.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.b.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		a.b.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, data)
	}
	return data
}

func (a benchAPI) create(template string) string {
	var sb struct{ ID string }
	_ = json.Unmarshal(a.do("POST", "/v1/sandboxes", map[string]any{"template": template}), &sb)
	return sb.ID
}

// cycle times create + exec `true` + delete of one sandbox of template.
func (a benchAPI) cycle(template string) time.Duration {
	start := time.Now()
	id := a.create(template)
	out := a.do("POST", "/v1/sandboxes/"+id+"/exec", map[string]any{"cmd": []string{"true"}})
	a.do("DELETE", "/v1/sandboxes/"+url.PathEscape(id), nil)
	d := time.Since(start)
	if !strings.Contains(string(out), `"exit_code":0`) {
		a.b.Fatalf("exec true: %s", out)
	}
	return d
}

// diskPerSandbox creates n sandboxes of template, each writing nothing,
// and returns the data dir's growth per sandbox in MiB (du of allocated
// blocks, the mounted disks themselves not crossed).
func (a benchAPI) diskPerSandbox(dataDir, template string, n int) float64 {
	before := duBytes(a.b, dataDir)
	ids := make([]string, 0, n)
	defer func() {
		for _, id := range ids {
			a.do("DELETE", "/v1/sandboxes/"+id, nil)
		}
	}()
	for i := 0; i < n; i++ {
		ids = append(ids, a.create(template))
	}
	after := duBytes(a.b, dataDir)
	a.b.Logf("%d sandboxes of %s: data dir %d -> %d bytes", n, template, before, after)
	return float64(after-before) / float64(n) / (1 << 20)
}

func quantileMs(samples []time.Duration, q float64) float64 {
	if len(samples) == 0 {
		return 0
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	return float64(s[min(int(q*float64(len(s))), len(s)-1)].Microseconds()) / 1000
}
