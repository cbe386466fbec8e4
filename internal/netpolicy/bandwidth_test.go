package netpolicy

import (
	"bytes"
	"io"
	"net/netip"
	"strconv"
	"testing"
	"time"
)

func TestBandwidthLimit(t *testing.T) {
	n := newTestNet(t)
	cfg := n.config()
	cfg.BandwidthBits = 8_000_000
	m := n.newManager(cfg)
	_, path := setup(t, m, sandboxNetwork(nil, nil))
	const size = 4 << 20 // 4 MiB at 8 Mbit/s is about 4.2 s
	// Generous: only checks that the limit applies at all.
	const atLeast = 2 * time.Second
	client := httpClient(path)
	base := "http://" + netip.AddrPortFrom(n.serverIP, 80).String()

	start := time.Now()
	resp, err := client.Get(base + "/bulk?n=" + strconv.Itoa(size))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	down := time.Since(start)
	if err != nil || got != size {
		t.Fatalf("download: %d bytes, %v", got, err)
	}
	t.Logf("download of 4 MiB took %v (%.1f Mbit/s)", down, float64(size*8)/down.Seconds()/1e6)
	if down < atLeast {
		t.Errorf("download of 4 MiB at 8 Mbit/s took %v, want > %v", down, atLeast)
	}

	start = time.Now()
	resp, err = client.Post(base+"/bulk", "application/octet-stream", bytes.NewReader(make([]byte, size)))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	up := time.Since(start)
	if string(body) != strconv.Itoa(size) {
		t.Fatalf("upload: server got %s bytes", body)
	}
	t.Logf("upload of 4 MiB took %v (%.1f Mbit/s)", up, float64(size*8)/up.Seconds()/1e6)
	if up < atLeast {
		t.Errorf("upload of 4 MiB at 8 Mbit/s took %v, want > %v", up, atLeast)
	}
}
