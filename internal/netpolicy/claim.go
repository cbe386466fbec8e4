package netpolicy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// claimDir holds one claim file per bridge of an agentbox manager on this
// host (<bridge>.claim), the host lock that serializes choosing, and the
// note that agentbox turned IP forwarding on. It is under /run: claims go
// away on reboot, with the bridges they describe.
var claimDir = "/run/agentbox/net"

const (
	claimSuffix   = ".claim"
	hostLockName  = ".lock"
	forwardMarker = "ip_forward.restore"
)

// claimRecord is the content of a claim file.
type claimRecord struct {
	Bridge   string       `json:"bridge"`
	Subnet   netip.Prefix `json:"subnet"`
	StateDir string       `json:"state_dir"`
	PID      int          `json:"pid"`
}

func claimPath(bridge string) string { return filepath.Join(claimDir, bridge+claimSuffix) }

// lockHost takes the host-wide lock under which managers choose, claim and
// create their bridges (and decide about IP forwarding), so two starting at
// once cannot pick the same slot. It waits up to a minute or ctx.
func lockHost(ctx context.Context) (unlock func(), err error) {
	if err := os.MkdirAll(claimDir, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", claimDir, err)
	}
	f, err := os.OpenFile(filepath.Join(claimDir, hostLockName), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open host network lock: %w", err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil // closing releases the lock
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("another agentbox daemon holds the host network lock %s for more than a minute", f.Name())
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// claim is a claim file this manager holds: open and flock()ed for as long
// as the manager runs.
type claim struct {
	f    *os.File
	path string
}

// takeClaim writes and locks the claim of rec.Bridge. The caller holds the
// host lock and has checked that the claim is free or its own.
func takeClaim(rec claimRecord) (*claim, error) {
	path := claimPath(rec.Bridge)
	for range 3 {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, fmt.Errorf("open claim: %w", err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			return nil, fmt.Errorf("claim bridge %s: %s is locked by another process: %w", rec.Bridge, path, err)
		}
		// A claim removed (and maybe made anew) between open and lock: the
		// lock is on a file nobody else sees; take the new one.
		var a, b unix.Stat_t
		if unix.Fstat(int(f.Fd()), &a) != nil || unix.Stat(path, &b) != nil || a.Ino != b.Ino || a.Dev != b.Dev {
			f.Close()
			continue
		}
		data, err := json.MarshalIndent(rec, "", "  ")
		if err != nil {
			f.Close()
			return nil, err
		}
		// Written in place: a rename would put a new, unlocked file there.
		err = f.Truncate(0)
		if err == nil {
			_, err = f.WriteAt(append(data, '\n'), 0)
		}
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("write claim %s: %w", path, err)
		}
		return &claim{f: f, path: path}, nil
	}
	return nil, fmt.Errorf("claim bridge %s: %s keeps changing", rec.Bridge, path)
}

// release unlocks the claim and keeps the file: the bridge stays this state
// directory's for its next start.
func (c *claim) release() {
	if c != nil && c.f != nil {
		c.f.Close()
		c.f = nil
	}
}

// remove deletes the claim file (still locked, so nobody takes it half
// removed) and unlocks it.
func (c *claim) remove() error {
	if c == nil || c.f == nil {
		return nil
	}
	err := os.Remove(c.path)
	c.release()
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove claim: %w", err)
	}
	return nil
}

// readClaims reads every claim file, finding out whether its owner runs
// and whether its owner's state still names the bridge.
func readClaims() (map[string]claimInfo, error) {
	out := map[string]claimInfo{}
	entries, err := os.ReadDir(claimDir)
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", claimDir, err)
	}
	for _, e := range entries {
		bridge, ok := strings.CutSuffix(e.Name(), claimSuffix)
		if !ok || e.IsDir() {
			continue
		}
		c, err := readClaim(filepath.Join(claimDir, e.Name()))
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // removed while we looked
			}
			return nil, err
		}
		if c.Bridge != bridge {
			c.Bridge = bridge
		}
		out[bridge] = c
	}
	return out, nil
}

func readClaim(path string) (claimInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return claimInfo{}, err
	}
	defer f.Close()
	var c claimInfo
	// The lock's state, before the content: an owner writes its record
	// while it holds the lock.
	switch err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); {
	case err == nil:
		defer func() { _ = unix.Flock(int(f.Fd()), unix.LOCK_UN) }() // closing the file unlocks too
	case errors.Is(err, unix.EWOULDBLOCK):
		c.live = true
	default:
		return c, fmt.Errorf("lock %s: %w", path, err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return c, err
	}
	if len(strings.TrimSpace(string(b))) > 0 {
		if err := json.Unmarshal(b, &c.claimRecord); err != nil && !c.live {
			// A torn file no running owner is writing: nobody's.
			return c, nil
		}
	}
	if c.StateDir != "" {
		lb, _ := readLastChoice(c.StateDir)
		c.recorded = lb == strings.TrimSuffix(filepath.Base(path), claimSuffix)
	}
	return c, nil
}

// readLastChoice returns the bridge and subnet a state directory's state
// file records (zero values when there is none).
func readLastChoice(stateDir string) (string, netip.Prefix) {
	b, err := os.ReadFile(statePath(stateDir))
	if err != nil {
		return "", netip.Prefix{}
	}
	var st struct {
		Bridge string       `json:"bridge"`
		Subnet netip.Prefix `json:"subnet"`
	}
	if json.Unmarshal(b, &st) != nil {
		return "", netip.Prefix{}
	}
	return st.Bridge, st.Subnet
}

// readHost gathers the host view the choice needs.
func readHost() (hostView, error) {
	v := hostView{links: map[string]hostLink{}, tables: map[string]bool{}}
	var err error
	if v.claims, err = readClaims(); err != nil {
		return v, err
	}
	links, err := netlink.LinkList()
	if err != nil {
		return v, fmt.Errorf("list links: %w", err)
	}
	byIndex := map[int]string{}
	for _, l := range links {
		a := l.Attrs()
		byIndex[a.Index] = a.Name
		v.links[a.Name] = hostLink{kind: l.Type()}
	}
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		return v, fmt.Errorf("list addresses: %w", err)
	}
	for _, a := range addrs {
		name, ok := byIndex[a.LinkIndex]
		if !ok || a.IPNet == nil {
			continue
		}
		ip, ok := netip.AddrFromSlice(a.IPNet.IP)
		if !ok || !ip.Unmap().Is4() {
			continue
		}
		bits, _ := a.IPNet.Mask.Size()
		l := v.links[name]
		l.addrs = append(l.addrs, netip.PrefixFrom(ip.Unmap(), bits))
		v.links[name] = l
	}
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return v, fmt.Errorf("list routes: %w", err)
	}
	for _, r := range routes {
		if r.Dst == nil {
			continue // a default route
		}
		ip, ok := netip.AddrFromSlice(r.Dst.IP)
		if !ok {
			continue
		}
		bits, _ := r.Dst.Mask.Size()
		v.routes = append(v.routes, hostRoute{dst: netip.PrefixFrom(ip.Unmap(), bits).Masked(), link: byIndex[r.LinkIndex]})
	}
	conn, err := nftables.New()
	if err != nil {
		return v, fmt.Errorf("nftables: %w", err)
	}
	tables, err := conn.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return v, fmt.Errorf("list nftables tables: %w", err)
	}
	for _, t := range tables {
		v.tables[t.Name] = true
	}
	v.reserved = dockerPools(dockerDaemonJSON)
	return v, nil
}

var dockerDaemonJSON = "/etc/docker/daemon.json"

// dockerPools returns the networks Docker's configuration gives its own
// bridges (bip, fixed-cidr, default-address-pools), which may not exist yet.
// Its built-in pools (172.17.0.0/16 and up, 192.168.0.0/16) lie outside
// the subnets picked here.
func dockerPools(path string) []reservedNet {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var cfg struct {
		BIP       string `json:"bip"`
		FixedCIDR string `json:"fixed-cidr"`
		Pools     []struct {
			Base string `json:"base"`
		} `json:"default-address-pools"`
	}
	if json.Unmarshal(b, &cfg) != nil {
		return nil
	}
	var out []reservedNet
	add := func(s, key string) {
		if p, err := netip.ParsePrefix(s); err == nil && p.Addr().Is4() {
			out = append(out, reservedNet{net: p.Masked(), by: "Docker's " + key + " in " + path})
		}
	}
	add(cfg.BIP, "bip")
	add(cfg.FixedCIDR, "fixed-cidr")
	for _, p := range cfg.Pools {
		add(p.Base, "default-address-pools")
	}
	return out
}

// otherClaims reports whether any claim file other than bridge's exists:
// another agentbox network on this host, running or not, that needs IP
// forwarding.
func otherClaims(bridge string) bool {
	entries, _ := os.ReadDir(claimDir)
	for _, e := range entries {
		if b, ok := strings.CutSuffix(e.Name(), claimSuffix); ok && b != bridge {
			return true
		}
	}
	return false
}
