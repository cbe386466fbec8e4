package daemon

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/config"
)

func TestSplitSubnet(t *testing.T) {
	p := netip.MustParsePrefix("10.88.0.0/16")
	for _, c := range []struct {
		i, n int
		want string
	}{{0, 1, "10.88.0.0/16"}, {0, 2, "10.88.0.0/17"}, {1, 2, "10.88.128.0/17"}, {2, 3, "10.88.128.0/18"}, {4, 5, "10.88.128.0/19"}, {31, 32, "10.88.248.0/21"}} {
		got, err := splitSubnet(p, c.i, c.n)
		if err != nil || got.String() != c.want {
			t.Errorf("worker %d of %d: %v %v, want %s", c.i, c.n, got, err, c.want)
		}
	}
	// Slices of different workers never overlap.
	a, _ := splitSubnet(p, 0, 3)
	b, _ := splitSubnet(p, 1, 3)
	if a.Overlaps(b) {
		t.Fatalf("%s overlaps %s", a, b)
	}
	if _, err := splitSubnet(netip.MustParsePrefix("10.0.0.0/28"), 1, 2); err == nil {
		t.Fatal("a /28 split in two gave slices under /28")
	}
}

func TestCheckWorkers(t *testing.T) {
	load := func(kv map[string]string) *config.Config {
		c, err := config.Load("", nil, kv)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if err := checkWorkers(load(map[string]string{"WORKERS": "2"})); err == nil || !strings.Contains(err.Error(), "REDIS_ENABLED") {
		t.Fatalf("WORKERS=2 without Redis: %v", err)
	}
	if err := checkWorkers(load(map[string]string{"WORKERS": "2", "REDIS_ENABLED": "true", "TEMPLATE_DIR": "/srv/t"})); err == nil {
		t.Fatal("WORKERS=2 with one TEMPLATE_DIR accepted")
	}
	if err := checkWorkers(load(map[string]string{"WORKERS": "32", "REDIS_ENABLED": "true", "NETWORK_SUBNET": "10.0.0.0/24"})); err == nil {
		t.Fatal("32 workers in a /24 accepted")
	}
	// Unset bridge and subnet stay unset: each worker picks free ones.
	cfg := load(map[string]string{"WORKERS": "2", "REDIS_ENABLED": "true"})
	if err := checkWorkers(cfg); err != nil {
		t.Fatal(err)
	}
	got, err := workerSettings(cfg, "/data", "host-1", 1, 2)
	if err != nil || len(got) != 2 {
		t.Fatalf("worker settings with defaults: %v %v", got, err)
	}
	cfg = load(map[string]string{"WORKERS": "2", "REDIS_ENABLED": "true", "NETWORK_BRIDGE": "abx0", "NETWORK_SUBNET": "10.88.0.0/16"})
	if err := checkWorkers(cfg); err != nil {
		t.Fatal(err)
	}
	got, err = workerSettings(cfg, "/data", "host-1", 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"AGENTBOX_DATA_DIR": "/data/workers/1", "NODE_ID": "host-1-w1", "NETWORK_BRIDGE": "abx0-w1", "NETWORK_SUBNET": "10.88.128.0/17"}
	for _, s := range got {
		if want[s.name] != s.value {
			t.Errorf("%s = %q, want %q", s.name, s.value, want[s.name])
		}
		delete(want, s.name)
	}
	if len(want) != 0 {
		t.Errorf("missing settings: %v", want)
	}
	// The settings a worker gets are valid settings.
	kv := map[string]string{"WORKERS": "2", "REDIS_ENABLED": "true", "NETWORK_BRIDGE": "abx0", "NETWORK_SUBNET": "10.88.0.0/16"}
	for _, s := range got {
		kv[s.name] = s.value
	}
	load(kv)
}
