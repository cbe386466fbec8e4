package e2e

import (
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkVolumes measures, through a daemon on this host:
//
//   - sequential write and read throughput of 256 MiB with dd in a
//     sandbox, on a local volume and on the sandbox's own disk (both ext4
//     on a loop device; the write ends with fsync, the read follows a
//     drop of the page cache, so both reach the image file);
//
//   - the latency of one fork ×10 request of a running sandbox with
//     64 MiB written in its /workspace.
//
//     go test -run '^$' -bench Volumes -benchtime 3x ./test/e2e/
func BenchmarkVolumes(b *testing.B) {
	base := startBenchDaemon(b, "MAX_SANDBOXES_PER_USER=0", "STORAGE_QUOTA_PER_USER=0")
	api := benchAPI{b: b, url: base}
	api.do("POST", "/v1/volumes", map[string]any{"name": "bench", "size": "1G"})
	var sb struct{ ID string }
	_ = json.Unmarshal(api.do("POST", "/v1/sandboxes", map[string]any{"resources": map[string]any{"disk": "1G"},
		"volumes": []map[string]any{{"name": "bench", "path": "/vol"}}}), &sb)
	exec := func(id, script string) string {
		var r struct {
			ExitCode int    `json:"exit_code"`
			Stdout   string `json:"stdout"`
			Stderr   string `json:"stderr"`
		}
		_ = json.Unmarshal(api.do("POST", "/v1/sandboxes/"+id+"/exec", map[string]any{"cmd": []string{"/bin/sh", "-c", script}, "timeout": 300}), &r)
		if r.ExitCode != 0 {
			b.Fatalf("%s: %s", script, r.Stderr)
		}
		return r.Stdout + r.Stderr
	}
	// dd's last line: "... copied, 1.2 s, 215 MB/s"
	rate := func(out string) float64 {
		lines := strings.Split(strings.TrimSpace(out), "\n")
		f := strings.Fields(lines[len(lines)-1])
		v, _ := strconv.ParseFloat(f[len(f)-2], 64)
		switch f[len(f)-1] {
		case "GB/s":
			v *= 1000
		case "kB/s":
			v /= 1000
		}
		return v
	}
	b.Run("throughput", func(b *testing.B) {
		res := map[string][]float64{}
		for i := 0; i < b.N; i++ {
			for _, dir := range []string{"/vol", "/workspace"} {
				res[dir+"-write"] = append(res[dir+"-write"], rate(exec(sb.ID, "dd if=/dev/zero of="+dir+"/f bs=1M count=256 conv=fsync 2>&1")))
				// The page cache cannot be dropped from inside; O_DIRECT
				// reads bypass it.
				res[dir+"-read"] = append(res[dir+"-read"], rate(exec(sb.ID, "dd if="+dir+"/f of=/dev/null bs=1M iflag=direct 2>&1")))
				exec(sb.ID, "rm -f "+dir+"/f")
			}
		}
		for k, v := range res {
			sum := 0.0
			for _, x := range v {
				sum += x
			}
			b.ReportMetric(sum/float64(len(v)), strings.TrimPrefix(k, "/")+"-MB/s")
		}
	})
	exec(sb.ID, "dd if=/dev/urandom of=/workspace/state bs=1M count=64 2>/dev/null")
	b.Run("fork-x10", func(b *testing.B) {
		var lat []time.Duration
		for i := 0; i < b.N; i++ {
			start := time.Now()
			var out struct{ Sandboxes []struct{ ID string } }
			_ = json.Unmarshal(api.do("POST", "/v1/sandboxes/"+sb.ID+"/fork", map[string]any{"count": 10}), &out)
			lat = append(lat, time.Since(start))
			if len(out.Sandboxes) != 10 {
				b.Fatalf("%d forks", len(out.Sandboxes))
			}
			for _, f := range out.Sandboxes {
				api.do("DELETE", "/v1/sandboxes/"+f.ID, nil)
			}
		}
		b.ReportMetric(quantileMs(lat, 0.5), "p50-ms")
		b.ReportMetric(quantileMs(lat, 0.99), "p99-ms")
		b.ReportMetric(quantileMs(lat, 0.5)/10, "per-fork-ms")
	})
	api.do("DELETE", "/v1/sandboxes/"+sb.ID, nil)
	api.do("DELETE", "/v1/volumes/bench", nil)
}

// BenchmarkSnapshotSize measures one snapshot of a running sandbox of the
// built-in base template with 10 MB and with 500 MB of random data written
// to its home (the snapshot's own layer), through a daemon on
// the test cache's template store (run TestE2BSDK or make templates
// first): the request until the template is stored, and the layer's size.
//
//	go test -run '^$' -bench SnapshotSize -benchtime 3x ./test/e2e/
func BenchmarkSnapshotSize(b *testing.B) {
	cache := os.Getenv("AGENTBOX_TEST_CACHE")
	if cache == "" {
		home, _ := os.UserCacheDir()
		cache = filepath.Join(home, "agentbox-test")
	}
	base := startBenchDaemon(b, "TEMPLATE_DIR="+filepath.Join(cache, "templates"), "STORAGE_QUOTA_PER_USER=0", "MAX_SANDBOXES_PER_USER=0")
	api := benchAPI{b: b, url: base}
	var sb struct{ ID string }
	_ = json.Unmarshal(api.do("POST", "/v1/sandboxes", map[string]any{"template": "base", "resources": map[string]any{"disk": "2G"}}), &sb)
	defer api.do("DELETE", "/v1/sandboxes/"+sb.ID, nil)
	for _, mb := range []int{10, 500} {
		b.Run(strconv.Itoa(mb)+"MB", func(b *testing.B) {
			var lat []time.Duration
			var layer int64
			for i := 0; i < b.N; i++ {
				api.do("POST", "/v1/sandboxes/"+sb.ID+"/exec", map[string]any{"cmd": []string{"/bin/sh", "-c",
					"rm -f ~/blob && head -c " + strconv.Itoa(mb) + "000000 /dev/urandom > ~/blob && sync"}, "timeout": 300})
				name := "bench-snap-" + strconv.Itoa(mb) + "-" + strconv.Itoa(i)
				start := time.Now()
				var t struct {
					Name, Tag string
					Layers    []struct{ Size int64 }
				}
				_ = json.Unmarshal(api.do("POST", "/v1/sandboxes/"+sb.ID+"/snapshot", map[string]any{"name": name}), &t)
				lat = append(lat, time.Since(start))
				if len(t.Layers) > 0 {
					layer = t.Layers[len(t.Layers)-1].Size
				}
				api.do("DELETE", "/v1/templates/"+url.PathEscape(t.Name+":"+t.Tag), nil)
			}
			b.ReportMetric(quantileMs(lat, 0.5), "p50-ms")
			b.ReportMetric(quantileMs(lat, 0.99), "p99-ms")
			b.ReportMetric(float64(layer)/1e6, "layer-MB")
		})
	}
}
