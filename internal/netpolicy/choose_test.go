package netpolicy

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// view builds a host view: eth0 on a LAN and docker0, plus what the case adds.
func view() hostView {
	return hostView{
		links: map[string]hostLink{
			"lo":      {kind: "device", addrs: []netip.Prefix{pfx("127.0.0.1/8")}},
			"eth0":    {kind: "device", addrs: []netip.Prefix{pfx("192.0.2.2/24")}},
			"docker0": {kind: "bridge", addrs: []netip.Prefix{pfx("172.17.0.1/16")}},
		},
		routes: []hostRoute{{dst: pfx("192.0.2.0/24"), link: "eth0"}, {dst: pfx("172.17.0.0/16"), link: "docker0"}},
		tables: map[string]bool{},
		claims: map[string]claimInfo{},
	}
}

// withBridge adds a bridge with its connected route and, when owner is not
// empty, a claim (live or stopped-but-recorded).
func (v hostView) withBridge(name, gw string, owner string, live bool) hostView {
	p := pfx(gw)
	v.links[name] = hostLink{kind: "bridge", addrs: []netip.Prefix{p}}
	v.routes = append(v.routes, hostRoute{dst: p.Masked(), link: name})
	v.tables[name] = true
	if owner != "" {
		v.claims[name] = claimInfo{claimRecord: claimRecord{Bridge: name, Subnet: p.Masked(), StateDir: owner, PID: 4242},
			live: live, recorded: true}
	}
	return v
}

const me = "/var/lib/me/net"

func TestChooseFirstFree(t *testing.T) {
	for _, c := range []struct {
		name       string
		v          hostView
		bridge     string
		subnet     string
		skipped    int
		skipReason string
	}{
		{"empty host", view(), "agentbox0", "10.88.0.0/16", 0, ""},
		{"an older agentbox on agentbox0", view().withBridge("agentbox0", "10.88.0.1/16", "", false),
			"agentbox1", "10.89.0.0/16", 1, "an agentbox daemon of an older version"},
		{"a running daemon on agentbox0", view().withBridge("agentbox0", "10.88.0.1/16", "/other/net", true),
			"agentbox1", "10.89.0.0/16", 1, "running agentbox daemon with network state /other/net (pid 4242)"},
		{"a stopped daemon whose sandboxes run on", view().withBridge("agentbox0", "10.88.0.1/16", "/other/net", false),
			"agentbox1", "10.89.0.0/16", 1, "stopped agentbox daemon"},
		{"two daemons", view().withBridge("agentbox0", "10.88.0.1/16", "/a/net", true).withBridge("agentbox1", "10.89.0.1/16", "/b/net", true),
			"agentbox2", "10.90.0.0/16", 2, ""},
		{"a claim whose bridge does not exist yet still reserves its subnet", func() hostView {
			v := view()
			v.claims["custom"] = claimInfo{claimRecord: claimRecord{Bridge: "custom", Subnet: pfx("10.88.0.0/24"), StateDir: "/x/net"}, live: true}
			return v
		}(), "agentbox1", "10.89.0.0/16", 1, "reserved for bridge custom"},
		{"a stale claim with nothing behind it is free", func() hostView {
			v := view()
			v.claims["agentbox0"] = claimInfo{claimRecord: claimRecord{Bridge: "agentbox0", Subnet: pfx("10.88.0.0/16"), StateDir: "/gone/net"}}
			return v
		}(), "agentbox0", "10.88.0.0/16", 0, ""},

		{"an interface of another program with the name", func() hostView {
			v := view()
			v.links["agentbox0"] = hostLink{kind: "dummy"}
			return v
		}(), "agentbox1", "10.89.0.0/16", 1, "an interface agentbox0 (dummy) exists"},
		{"a route into a slot's subnet", func() hostView {
			v := view()
			v.routes = append(v.routes, hostRoute{dst: pfx("10.88.7.0/24"), link: "eth0"})
			return v
		}(), "agentbox1", "10.89.0.0/16", 1, "the route 10.88.7.0/24 dev eth0"},
		{"an address inside a slot's subnet (a VPN)", func() hostView {
			v := view()
			v.links["tun0"] = hostLink{kind: "tun", addrs: []netip.Prefix{pfx("10.88.200.5/32")}}
			return v
		}(), "agentbox1", "10.89.0.0/16", 1, "10.88.200.5/32 on tun0"},
		{"a route covering everything is not a network", func() hostView {
			v := view()
			v.routes = append(v.routes, hostRoute{dst: pfx("0.0.0.0/1"), link: "tun0"}, hostRoute{dst: pfx("128.0.0.0/1"), link: "tun0"})
			return v
		}(), "agentbox0", "10.88.0.0/16", 0, ""},
		{"Docker's configured pools", func() hostView {
			v := view()
			v.reserved = []reservedNet{{net: pfx("10.88.0.0/15"), by: "Docker's default-address-pools"}}
			return v
		}(), "agentbox2", "10.90.0.0/16", 2, "Docker's default-address-pools"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ch, err := choose(choiceRequest{stateDir: me}, c.v)
			if err != nil {
				t.Fatal(err)
			}
			if ch.bridge != c.bridge || ch.subnet != pfx(c.subnet) || ch.how != "first free" {
				t.Fatalf("picked %s %s (%s), want %s %s", ch.bridge, ch.subnet, ch.how, c.bridge, c.subnet)
			}
			if len(ch.skipped) != c.skipped || (c.skipReason != "" && !strings.Contains(strings.Join(ch.skipped, "\n"), c.skipReason)) {
				t.Fatalf("skipped %q, want %d mentioning %q", ch.skipped, c.skipped, c.skipReason)
			}
		})
	}
}

// A bridge left over by a daemon whose data dir is gone (its claim names a
// state that does not record it, and nobody holds the claim) is taken
// over, configured or picked; a stopped daemon's is not.
func TestChooseReclaimsLeftovers(t *testing.T) {
	left := func(recorded bool) hostView {
		v := view().withBridge("agentbox0", "10.88.0.1/16", "/gone/net", false)
		c := v.claims["agentbox0"]
		c.recorded = recorded
		v.claims["agentbox0"] = c
		return v
	}
	for _, req := range []choiceRequest{{stateDir: me}, {stateDir: me, bridge: "agentbox0"}, {stateDir: me, bridge: "agentbox0", subnet: pfx("10.88.0.0/16")}} {
		ch, err := choose(req, left(false))
		if err != nil || ch.bridge != "agentbox0" || ch.subnet != pfx("10.88.0.0/16") || ch.reclaim == nil || ch.reclaim.StateDir != "/gone/net" {
			t.Fatalf("%+v: %+v, %v", req, ch, err)
		}
	}
	ch, err := choose(choiceRequest{stateDir: me}, left(true))
	if err != nil || ch.bridge != "agentbox1" || ch.reclaim != nil {
		t.Fatalf("a stopped daemon's bridge: %+v, %v", ch, err)
	}
	if _, err := choose(choiceRequest{stateDir: me, bridge: "agentbox0"}, left(true)); err == nil ||
		!strings.Contains(err.Error(), "stopped agentbox daemon with network state /gone/net") {
		t.Fatalf("configured bridge of a stopped daemon: %v", err)
	}
	// Its subnet stays taken for a manager that does not take the bridge.
	if _, err := choose(choiceRequest{stateDir: me, bridge: "other", subnet: pfx("10.88.0.0/16")}, left(false)); err == nil {
		t.Fatal("configured subnet of a left-over bridge under another name")
	}
	// Free choices reclaim nothing.
	if ch, _ := choose(choiceRequest{stateDir: me}, view()); ch.reclaim != nil {
		t.Fatalf("reclaim on an empty host: %+v", ch.reclaim)
	}
}

func TestChooseKeepsTheLastChoice(t *testing.T) {
	// A restart: the bridge of the last start, with sandboxes on it, is
	// picked again though lower slots are free.
	v := view().withBridge("agentbox5", "10.93.0.1/16", me, false)
	req := choiceRequest{stateDir: me, lastBridge: "agentbox5", lastSubnet: pfx("10.93.0.0/16")}
	ch, err := choose(req, v)
	if err != nil || ch.bridge != "agentbox5" || ch.subnet != pfx("10.93.0.0/16") || ch.how != "kept from the last start" {
		t.Fatalf("restart picked %+v, %v", ch, err)
	}
	// Claims live under /run: without it (and without the bridge, after a
	// reboot) the record alone keeps it.
	v = view()
	if ch, err = choose(req, v); err != nil || ch.bridge != "agentbox5" {
		t.Fatalf("after a reboot: %+v, %v", ch, err)
	}
	// Its subnet got taken meanwhile: the first free slot instead.
	v = view().withBridge("agentbox5", "10.93.0.1/16", me, false)
	v.links["wg0"] = hostLink{kind: "wireguard", addrs: []netip.Prefix{pfx("10.93.1.1/24")}}
	if ch, err = choose(req, v); err != nil || ch.bridge != "agentbox0" || ch.how != "first free" ||
		!strings.Contains(ch.skipped[0], "10.93.1.1/24 on wg0") {
		t.Fatalf("recorded subnet taken: %+v, %v", ch, err)
	}
	// A Docker pool configured over it meanwhile does not move it.
	v = view().withBridge("agentbox5", "10.93.0.1/16", me, false)
	v.reserved = []reservedNet{{net: pfx("10.92.0.0/15"), by: "Docker's bip"}}
	if ch, err = choose(req, v); err != nil || ch.bridge != "agentbox5" {
		t.Fatalf("Docker pool over the recorded subnet: %+v, %v", ch, err)
	}
	// Its name got taken by another daemon (claims are per host, a state
	// file can be copied): never adopted.
	v = view().withBridge("agentbox5", "10.93.0.1/16", "/other/net", true)
	if ch, err = choose(req, v); err != nil || ch.bridge != "agentbox0" {
		t.Fatalf("recorded bridge held by another daemon: %+v, %v", ch, err)
	}
	// An older version's state file (a subnet, no bridge) on the old
	// default bridge, which has no claim: that bridge is ours.
	v = view().withBridge("agentbox0", "10.88.0.1/16", "", false)
	ch, err = choose(choiceRequest{stateDir: me, lastSubnet: pfx("10.88.0.0/16")}, v)
	if err != nil || ch.bridge != "agentbox0" || ch.how != "kept from the last start" {
		t.Fatalf("upgrade from an older version: %+v, %v", ch, err)
	}
	// ... but not when the bridge carries another subnet.
	v = view().withBridge("agentbox0", "10.88.0.1/24", "", false)
	if ch, err = choose(choiceRequest{stateDir: me, lastSubnet: pfx("10.88.0.0/16")}, v); err != nil || ch.bridge != "agentbox1" {
		t.Fatalf("older state, foreign bridge: %+v, %v", ch, err)
	}
}

func TestChooseConfigured(t *testing.T) {
	busy := view().withBridge("agentbox0", "10.88.0.1/16", "/a/net", true)

	ch, err := choose(choiceRequest{stateDir: me, bridge: "mybr", subnet: pfx("10.50.0.0/24")}, busy)
	if err != nil || ch.bridge != "mybr" || ch.subnet != pfx("10.50.0.0/24") || ch.how != "configured" {
		t.Fatalf("free configured pair: %+v, %v", ch, err)
	}
	_, err = choose(choiceRequest{stateDir: me, bridge: "agentbox0", subnet: pfx("10.50.0.0/24")}, busy)
	for _, want := range []string{"NETWORK_BRIDGE=agentbox0 is taken", "running agentbox daemon with network state /a/net (pid 4242)",
		"set NETWORK_BRIDGE to a free name (agentbox1 is free)", "leave it unset"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("bridge of another daemon: %v; want %q", err, want)
		}
	}
	_, err = choose(choiceRequest{stateDir: me, bridge: "mybr", subnet: pfx("10.88.128.0/20")}, busy)
	for _, want := range []string{"NETWORK_SUBNET=10.88.128.0/20 is taken", "overlaps 10.88.0.1/16 on agentbox0 (the running agentbox daemon",
		"set NETWORK_SUBNET to a free range (10.89.0.0/16 is free)"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("subnet of another daemon: %v; want %q", err, want)
		}
	}
	_, err = choose(choiceRequest{stateDir: me, bridge: "eth0"}, busy)
	if err == nil || !strings.Contains(err.Error(), "an interface eth0 (device, 192.0.2.2/24) exists") {
		t.Errorf("another program's interface: %v", err)
	}
	_, err = choose(choiceRequest{stateDir: me, subnet: pfx("192.0.2.0/25")}, busy)
	if err == nil || !strings.Contains(err.Error(), "overlaps 192.0.2.2/24 on eth0") {
		t.Errorf("the host's LAN: %v", err)
	}
	// Its own bridge (a restart with the same settings).
	mine := view().withBridge("mybr", "10.50.0.1/24", me, false)
	if ch, err = choose(choiceRequest{stateDir: me, bridge: "mybr", subnet: pfx("10.50.0.0/24")}, mine); err != nil || ch.bridge != "mybr" {
		t.Fatalf("own configured bridge: %+v, %v", ch, err)
	}
	// One configured, the other picked.
	if ch, err = choose(choiceRequest{stateDir: me, bridge: "mybr2"}, busy); err != nil || ch.bridge != "mybr2" || ch.subnet != pfx("10.89.0.0/16") {
		t.Fatalf("configured bridge, picked subnet: %+v, %v", ch, err)
	}
	if ch, err = choose(choiceRequest{stateDir: me, subnet: pfx("10.60.0.0/16")}, busy); err != nil || ch.bridge != "agentbox1" || ch.subnet != pfx("10.60.0.0/16") {
		t.Fatalf("picked bridge, configured subnet: %+v, %v", ch, err)
	}
	// Two running daemons on one state directory: refused outright.
	shared := view().withBridge("agentbox3", "10.91.0.1/16", me, true)
	if _, err = choose(choiceRequest{stateDir: me}, shared); err == nil || !strings.Contains(err.Error(), "in use by another running agentbox daemon (pid 4242") {
		t.Errorf("shared state dir: %v", err)
	}
}

func TestChooseNothingFree(t *testing.T) {
	v := view()
	v.routes = append(v.routes, hostRoute{dst: pfx("10.0.0.0/8"), link: "tun0"})
	_, err := choose(choiceRequest{stateDir: me}, v)
	if err == nil || !strings.Contains(err.Error(), "no free bridge agentbox0...agentbox39 with subnet 10.88.0.0/16...10.127.0.0/16") ||
		!strings.Contains(err.Error(), "set NETWORK_BRIDGE and NETWORK_SUBNET") {
		t.Fatalf("everything overlapping: %v", err)
	}
}

// Claim files: a running owner's lock shows, a released claim stays its
// owner's while the owner's state names it, and removal frees it.
func TestClaimFiles(t *testing.T) {
	old := claimDir
	claimDir = t.TempDir()
	t.Cleanup(func() { claimDir = old })
	owner := t.TempDir()
	c, err := takeClaim(claimRecord{Bridge: "abtc0", Subnet: pfx("10.70.0.0/24"), StateDir: owner, PID: os.Getpid()})
	if err != nil {
		t.Fatal(err)
	}
	claims, err := readClaims()
	if err != nil {
		t.Fatal(err)
	}
	got := claims["abtc0"]
	if !got.live || got.recorded || got.StateDir != owner || got.Subnet != pfx("10.70.0.0/24") || got.PID != os.Getpid() {
		t.Fatalf("held claim read as %+v", got)
	}
	// A second claim of the same bridge fails while the first is held.
	if _, err := takeClaim(claimRecord{Bridge: "abtc0", StateDir: "/x"}); err == nil {
		t.Fatal("claimed a bridge another manager holds")
	}
	st, _ := json.Marshal(map[string]any{"bridge": "abtc0", "subnet": "10.70.0.0/24"})
	if err := os.WriteFile(filepath.Join(owner, "state.json"), st, 0o600); err != nil {
		t.Fatal(err)
	}
	c.release()
	claims, _ = readClaims()
	if got := claims["abtc0"]; got.live || !got.recorded {
		t.Fatalf("released claim read as %+v", got)
	}
	c, err = takeClaim(claimRecord{Bridge: "abtc0", StateDir: owner})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.remove(); err != nil {
		t.Fatal(err)
	}
	if claims, _ = readClaims(); len(claims) != 0 {
		t.Fatalf("claims after remove: %+v", claims)
	}
	if otherClaims("abtc0") {
		t.Fatal("otherClaims sees a removed claim")
	}
}

func TestDockerPools(t *testing.T) {
	p := filepath.Join(t.TempDir(), "daemon.json")
	os.WriteFile(p, []byte(`{"bip":"10.88.5.1/24","default-address-pools":[{"base":"10.90.0.0/15","size":24}],"log-driver":"json-file"}`), 0o644)
	got := dockerPools(p)
	if len(got) != 2 || got[0].net != pfx("10.88.5.0/24") || got[1].net != pfx("10.90.0.0/15") {
		t.Fatalf("pools = %+v", got)
	}
	if dockerPools(filepath.Join(t.TempDir(), "none.json")) != nil {
		t.Fatal("pools without a file")
	}
}
