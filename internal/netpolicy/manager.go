package netpolicy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Manager gives sandboxes network namespaces with filtered egress. It
// implements the native backend's NetworkProvider. Create it with New; all
// methods are safe for concurrent use, though Setup and Teardown of one
// sandbox are expected to be serialized by the caller.
type Manager struct {
	cfg      Config
	log      *slog.Logger
	fw       *firewall
	bridgeIP netip.Addr
	dns      *dnsFilter

	mu sync.Mutex // guards st and serializes state-file writes
	st *stateFile

	// pmu guards policies, the view of the DNS filter. Holding it for
	// writing while changing the firewall keeps the filter from learning
	// addresses under a policy that is being replaced.
	pmu      sync.RWMutex
	policies map[netip.Addr]policy
	// learned remembers, per sandbox, the addresses the DNS filter handed
	// out under the current policy and until when, for Permit (the
	// kernel's copy is the dns set, read when this one misses: after a
	// restart).
	learned map[netip.Addr]map[netip.Addr]learnedName
	// onPolicy is told a sandbox's new policy (SetPolicyHook).
	onPolicy func(id sandbox.ID, n sandbox.Network)

	bridge netlink.Link
	claim  *claim // this manager's claim of its bridge, locked while it runs
	picked choice // how the bridge and subnet were chosen

	closeOnce sync.Once
	closeErr  error

	stopPoll context.CancelFunc
	pollDone chan struct{}

	lmu       sync.Mutex // guards learned
	hmu       sync.Mutex // serializes host network refreshes (fw.hostNets)
	watchDone chan struct{}
}

// New sets up the host side: the bridge (picked when Config.Bridge and
// Config.Subnet are unset, see choose.go), IP forwarding, the nftables table
// (rebuilt from the persisted state, so sandboxes that survived a daemon
// restart keep their policy), Docker's DOCKER-USER chain if present, and the
// DNS filter. Call Reconcile next with the sandboxes that are still alive.
// It needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN for namespace mounts).
func New(ctx context.Context, cfg Config) (_ *Manager, err error) {
	cfg, err = cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("netpolicy: %w", err)
	}
	m, unlock, err := claimNetwork(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("netpolicy: %w", err)
	}
	defer func() {
		if unlock != nil {
			unlock()
		}
		if err != nil && m != nil {
			m.claim.release()
		}
	}()
	cfg = m.cfg
	for id, r := range m.st.Sandboxes {
		p, err := parsePolicy(r.Network)
		if err != nil {
			// Persisted policies were valid when stored; if one no longer
			// parses, fail closed: an empty allow list.
			m.log.Warn("stored network policy invalid, denying all egress", "sandbox", id, "err", err)
			p = policy{}
		}
		m.policies[r.Addr] = p
	}

	bridgePrefix := netip.PrefixFrom(m.bridgeIP, cfg.Subnet.Bits())
	if m.bridge, err = ensureBridge(cfg.Bridge, bridgePrefix); err != nil {
		return nil, fmt.Errorf("netpolicy: %w", err)
	}
	if readSysctl("net.ipv4.ip_forward") != "1" {
		if err := writeSysctl("net.ipv4.ip_forward", "1"); err != nil {
			return nil, fmt.Errorf("netpolicy: enable forwarding: %w", err)
		}
		// Whichever agentbox network closes last turns it off again.
		if err := os.WriteFile(filepath.Join(claimDir, forwardMarker), []byte("0\n"), 0o644); err != nil {
			m.log.Warn("note that forwarding was off", "err", err)
		}
	}
	// The bridge exists with its address: others starting now see it.
	unlock()
	unlock = nil

	if m.fw.hostNets, err = hostNets(cfg.Bridge); err != nil {
		return nil, fmt.Errorf("netpolicy: %w", err)
	}
	if err := m.fw.rebuild(m.policies); err != nil {
		return nil, fmt.Errorf("netpolicy: %w", err)
	}
	if _, err := m.fw.syncDockerUser(true); err != nil {
		return nil, fmt.Errorf("netpolicy: docker coexistence: %w", err)
	}
	bound, err := prepareNetnsDir(cfg.NetnsDir)
	if err != nil {
		return nil, fmt.Errorf("netpolicy: %w", err)
	}
	if bound {
		m.st.NetnsDirBound = true
		if err := m.st.save(cfg.StateDir); err != nil {
			return nil, fmt.Errorf("netpolicy: %w", err)
		}
	}
	m.dns, err = startDNS(dnsConfig{
		listen: m.bridgeIP, upstream: cfg.Upstream, timeout: cfg.DNSTimeout,
		rate: cfg.DNSRate, concurrency: cfg.DNSConcurrency, log: m.log,
	}, m)
	if err != nil {
		return nil, fmt.Errorf("netpolicy: %w", err)
	}
	pollCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	m.stopPoll, m.pollDone = stop, make(chan struct{})
	go m.poll(pollCtx)
	m.watchDone = make(chan struct{})
	go m.watchHostNets(pollCtx, m.watchDone)
	m.log.Info("sandbox network ready", "subnet", cfg.Subnet, "gateway", m.bridgeIP, "picked", m.picked.how,
		"skipped", strings.Join(m.picked.skipped, "; "), "state", cfg.StateDir, "upstream", cfg.Upstream)
	return m, nil
}

// claimNetwork picks the bridge and subnet and claims them, under the host
// lock, which it returns held: the caller releases it once the bridge
// exists. The returned manager has its config, state and claim.
func claimNetwork(ctx context.Context, cfg Config) (*Manager, func(), error) {
	unlock, err := lockHost(ctx)
	if err != nil {
		return nil, nil, err
	}
	ok := false
	defer func() {
		if !ok {
			unlock()
		}
	}()
	view, err := readHost()
	if err != nil {
		return nil, nil, err
	}
	req := choiceRequest{bridge: cfg.Bridge, subnet: cfg.Subnet, stateDir: cfg.StateDir}
	req.lastBridge, req.lastSubnet = readLastChoice(cfg.StateDir)
	ch, err := choose(req, view)
	if err != nil {
		return nil, nil, err
	}
	netnsDefault := cfg.NetnsDir == ""
	cfg.Bridge, cfg.Subnet = ch.bridge, ch.subnet
	cfg = cfg.pickedDefaults()
	m := &Manager{
		cfg:      cfg,
		log:      cfg.Logger.With("component", "netpolicy", "bridge", cfg.Bridge),
		fw:       newFirewall(cfg),
		bridgeIP: bridgeAddr(cfg.Subnet),
		policies: map[netip.Addr]policy{},
		learned:  map[netip.Addr]map[netip.Addr]learnedName{},
		picked:   ch,
	}
	if r := ch.reclaim; r != nil {
		m.log.Info("removing a bridge left over by another agentbox daemon", "network_state", r.StateDir, "old_subnet", r.Subnet)
		m.removeOldNetwork(cfg.Bridge, true)
	}
	if m.claim, err = takeClaim(claimRecord{Bridge: cfg.Bridge, Subnet: cfg.Subnet, StateDir: cfg.StateDir, PID: os.Getpid()}); err != nil {
		return nil, nil, err
	}
	// Our own earlier bridge, when we leave it (its subnet got taken, or
	// the configuration changed): nobody else may remove it.
	if old := req.lastBridge; old != "" && old != cfg.Bridge && view.ours(old, req) {
		m.log.Info("leaving the bridge of the last start", "old_bridge", old, "old_subnet", req.lastSubnet, "picked", ch.how)
		m.removeOldNetwork(old, netnsDefault)
	}
	if m.st, err = loadState(cfg.StateDir, cfg.Bridge, cfg.Subnet); err == nil {
		err = m.st.save(cfg.StateDir)
	}
	if err != nil {
		m.claim.release()
		return nil, nil, err
	}
	ok = true
	return m, unlock, nil
}

// removeOldNetwork removes what is left of a bridge this manager used
// before, or one left over by a manager that no longer records it:
// DOCKER-USER rules, table, bridge, the veths of its subnet, the namespace
// directory (when it is the default one) and the claim.
func (m *Manager) removeOldNetwork(bridge string, netnsDefault bool) {
	log := m.log.With("old_bridge", bridge)
	old := newFirewall(Config{Bridge: bridge})
	var errs []error
	if _, err := old.syncDockerUser(false); err != nil {
		errs = append(errs, err)
	}
	if c, err := nftables.New(); err == nil {
		if tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet); err == nil {
			for _, t := range tables {
				if t.Name == bridge {
					errs = append(errs, old.delete())
				}
			}
		}
	}
	// The sandboxes' veths: ports of that bridge only (another manager may
	// have the subnet by now, when the bridge had lost its address).
	if br, err := netlink.LinkByName(bridge); err == nil {
		if links, err := netlink.LinkList(); err == nil {
			for _, l := range links {
				if _, ok := vethAddr(l.Attrs().Name); ok && l.Attrs().MasterIndex == br.Attrs().Index {
					errs = append(errs, netlink.LinkDel(l))
				}
			}
		}
	}
	errs = append(errs, deleteLink(bridge))
	if netnsDefault {
		dir := "/run/agentbox/netns/" + bridge
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			errs = append(errs, removeNetns(filepath.Join(dir, e.Name())))
		}
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, err)
		}
		_ = os.Remove(dir)
	}
	if err := os.Remove(claimPath(bridge)); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		log.Warn("removing the old bridge incomplete", "err", err)
	}
}

// Bridge is the host bridge (and nftables table) of this manager.
func (m *Manager) Bridge() string { return m.cfg.Bridge }

// Subnet is the range sandbox addresses come from.
func (m *Manager) Subnet() netip.Prefix { return m.cfg.Subnet }

// BridgeIP is the sandboxes' gateway and nameserver.
func (m *Manager) BridgeIP() netip.Addr { return m.bridgeIP }

// NetnsPath is where the sandbox's network namespace is mounted (whether or
// not it currently exists).
func (m *Manager) NetnsPath(id sandbox.ID) string {
	return filepath.Join(m.cfg.NetnsDir, string(id))
}

// Addr returns the sandbox's address, if it has one.
func (m *Manager) Addr(id sandbox.ID) (netip.Addr, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.st.Sandboxes[id]
	return r.Addr, ok
}

// Setup creates the sandbox's network namespace, connects it to the bridge
// and installs its egress policy. It returns the namespace path to join and
// the nameserver for the sandbox's resolv.conf (the bridge address). Calling
// it again for a sandbox that has an address rebuilds its network and keeps
// the address.
func (m *Manager) Setup(ctx context.Context, id sandbox.ID, n sandbox.Network) (string, []string, error) {
	if err := id.Validate(); err != nil {
		return "", nil, err
	}
	if n.Mode != sandbox.NetworkEgress {
		return "", nil, sandbox.Errorf(sandbox.ClassInvalid, "network mode %q is not provided by netpolicy", n.Mode)
	}
	p, err := parsePolicy(n)
	if err != nil {
		return "", nil, err
	}

	m.mu.Lock()
	rec, exists := m.st.Sandboxes[id]
	if !exists {
		if rec.Addr, err = m.st.allocate(); err != nil {
			m.mu.Unlock()
			return "", nil, err
		}
	}
	rec.Network = n
	m.st.Sandboxes[id] = rec
	// Recorded before anything exists in the kernel: after a crash at any
	// point below, Reconcile knows what to look for.
	err = m.st.save(m.cfg.StateDir)
	m.mu.Unlock()
	if err != nil {
		return "", nil, err
	}

	if exists {
		_ = m.removeKernelState(id, rec.Addr) // best effort: what is left is replaced below
	}
	if err := m.createKernelState(ctx, id, rec.Addr, p); err != nil {
		_ = m.removeKernelState(id, rec.Addr) // the setup error is the one to report
		m.forget(id)
		return "", nil, fmt.Errorf("network setup for %s: %w", id, err)
	}
	return m.NetnsPath(id), []string{m.bridgeIP.String()}, nil
}

func (m *Manager) createKernelState(ctx context.Context, id sandbox.ID, addr netip.Addr, p policy) error {
	path := m.NetnsPath(id)
	if err := createNetns(path); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	// The firewall first: until the sandbox's map entries exist, its source
	// address is unknown and all its traffic is rejected anyway, but this
	// way its first packet already meets its policy.
	conn, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	if err := m.fw.addSandbox(conn, addr, p); err != nil {
		return err
	}
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("install firewall rules: %w", err)
	}
	m.pmu.Lock()
	m.policies[addr] = p
	m.pmu.Unlock()
	return connectNetns(vethConfig{
		bridge: m.bridge, nsPath: path, addr: addr, gateway: m.bridgeIP, rateBits: m.cfg.BandwidthBits,
	})
}

// removeKernelState deletes what Setup created in the kernel for one
// sandbox, logging (not returning) failures: it is called on paths that are
// already failing or must make progress regardless.
func (m *Manager) removeKernelState(id sandbox.ID, addr netip.Addr) error {
	m.pmu.Lock()
	delete(m.policies, addr)
	m.lmu.Lock()
	delete(m.learned, addr)
	m.lmu.Unlock()
	m.pmu.Unlock()
	if m.dns != nil {
		m.dns.limiter.forget(addr)
	}
	// The steps are independent and each waits for the kernel (RCU grace
	// periods for link and set removal, a conntrack dump), so they run in
	// parallel: teardown costs the slowest step, not the sum.
	var (
		wg   sync.WaitGroup
		emu  sync.Mutex
		errs []error
	)
	run := func(f func() error) {
		wg.Go(func() {
			if err := f(); err != nil {
				emu.Lock()
				errs = append(errs, err)
				emu.Unlock()
			}
		})
	}
	// Deleting the host end deletes the pair.
	run(func() error { return deleteLink(vethName(addr)) })
	run(func() error { return removeNetns(m.NetnsPath(id)) })
	run(func() error { return m.fw.removeSandboxes([]netip.Addr{addr}) })
	// A later sandbox may get this address: it must not inherit conntrack
	// entries (and their NAT mappings) of this one.
	run(func() error { return flushConntrack(addr) })
	wg.Wait()
	err := errors.Join(errs...)
	if err != nil {
		m.log.Warn("network teardown incomplete", "sandbox", id, "addr", addr, "err", err)
	}
	return err
}

// flushConntrack deletes every conntrack entry (and with it its NAT
// mapping) of a flow addr started or was the destination of.
func flushConntrack(addr netip.Addr) error {
	ip := net.IP(addr.AsSlice())
	var filters []netlink.CustomConntrackFilter
	for _, field := range []netlink.ConntrackFilterType{netlink.ConntrackOrigSrcIP, netlink.ConntrackOrigDstIP} {
		f := &netlink.ConntrackFilter{}
		if err := f.AddIP(field, ip); err != nil {
			return err
		}
		filters = append(filters, f)
	}
	// A dump the table's changes interrupted may have skipped entries: go
	// again (entries deleted by the first pass are not in the second).
	var err error
	for range 3 {
		if _, err = netlink.ConntrackDeleteFilters(netlink.ConntrackTable, unix.AF_INET, filters...); !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("flush conntrack of %s: %w", addr, err)
	}
	return nil
}

// ResetFlows forgets the connection state of a running sandbox whose
// processes are all gone (a warm reset between two users): its conntrack
// entries and their NAT mappings, and its DNS query budget. Without it the
// next user's packets could match a flow the previous user opened (an
// established UDP flow is accepted whatever the new policy says) and would
// inherit the previous user's rate limit.
func (m *Manager) ResetFlows(ctx context.Context, id sandbox.ID) error {
	if err := id.Validate(); err != nil {
		return err
	}
	addr, ok := m.Addr(id)
	if !ok {
		return sandbox.Errorf(sandbox.ClassNotFound, "sandbox %s has no network", id)
	}
	if m.dns != nil {
		m.dns.limiter.forget(addr)
	}
	return flushConntrack(addr)
}

// forget drops the sandbox's record.
func (m *Manager) forget(id sandbox.ID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.st.Sandboxes, id)
	if err := m.st.save(m.cfg.StateDir); err != nil {
		m.log.Warn("save network state", "err", err)
	}
}

// Teardown removes the sandbox's veth, namespace mount, firewall objects
// and address. It is idempotent.
func (m *Manager) Teardown(ctx context.Context, id sandbox.ID) error {
	if err := id.Validate(); err != nil {
		return err
	}
	m.mu.Lock()
	rec, ok := m.st.Sandboxes[id]
	m.mu.Unlock()
	if !ok {
		return removeNetns(m.NetnsPath(id))
	}
	err := m.removeKernelState(id, rec.Addr)
	m.forget(id)
	return err
}

// UpdatePolicy replaces the egress policy of a running sandbox. New
// connections follow it at once; connections already established under
// the old policy are left alone. DNS-learned addresses are dropped, since
// the allowed names may have changed.
func (m *Manager) UpdatePolicy(ctx context.Context, id sandbox.ID, n sandbox.Network) error {
	if err := id.Validate(); err != nil {
		return err
	}
	if n.Mode != sandbox.NetworkEgress {
		return sandbox.Errorf(sandbox.ClassInvalid, "cannot change network mode to %q on a running sandbox", n.Mode)
	}
	p, err := parsePolicy(n)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	rec, ok := m.st.Sandboxes[id]
	if !ok {
		return sandbox.Errorf(sandbox.ClassNotFound, "sandbox %s has no network", id)
	}
	m.pmu.Lock()
	defer m.pmu.Unlock()
	conn, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	if err := m.fw.setPolicy(conn, rec.Addr, p, true); err != nil {
		return err
	}
	// Addresses learned for names the new policy still allows stay
	// allowed (so are the connections to them); the others go.
	kept := m.keepLearned(rec.Addr, p)
	if len(kept) > 0 {
		if err := conn.SetAddElements(m.fw.dnsSet(rec.Addr), kept); err != nil {
			return err
		}
	}
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("update policy of %s: %w", id, err)
	}
	m.policies[rec.Addr] = p
	rec.Network = n
	m.st.Sandboxes[id] = rec
	if err := m.st.save(m.cfg.StateDir); err != nil {
		return err
	}
	// Connections the new policy would not open are cut: their conntrack
	// entries go, so their next packet is a new flow the policy rejects
	// (a reset to the sandbox) and the peer's next packet finds no
	// mapping on the host.
	if err := m.cutDenied(rec.Addr, p); err != nil {
		m.log.Warn("cut connections the new policy denies", "sandbox", id, "err", err)
	}
	if m.onPolicy != nil {
		m.onPolicy(id, n)
	}
	return nil
}

// Denials returns how many packets of the sandbox were rejected (egress
// and attempts to reach the host), from an nftables counter.
func (m *Manager) Denials(id sandbox.ID) uint64 {
	addr, ok := m.Addr(id)
	if !ok {
		return 0
	}
	n, _ := m.fw.denials(addr)
	return n
}

// Traffic counts the bytes the sandbox sent and received over its veth
// since its network was set up (what the host side received is what the
// sandbox sent). Zero for a sandbox without networking.
func (m *Manager) Traffic(id sandbox.ID) (sent, received uint64) {
	addr, ok := m.Addr(id)
	if !ok {
		return 0, 0
	}
	l, err := netlink.LinkByName(vethName(addr))
	if err != nil || l.Attrs().Statistics == nil {
		return 0, 0
	}
	st := l.Attrs().Statistics
	return st.RxBytes, st.TxBytes
}

// dnsPolicy implements dnsPolicySource.
func (m *Manager) dnsPolicy(src netip.Addr) (policy, bool) {
	m.pmu.RLock()
	defer m.pmu.RUnlock()
	p, ok := m.policies[src]
	return p, ok
}

// learn implements dnsPolicySource: under the policy lock, re-check that
// name is still allowed and add the addresses.
func (m *Manager) learn(src netip.Addr, name string, addrs []learnedAddr) (bool, error) {
	m.pmu.RLock()
	defer m.pmu.RUnlock()
	p, ok := m.policies[src]
	if !ok || !p.nameAllowed(name) {
		return false, nil
	}
	if !p.learns() {
		return true, nil
	}
	m.lmu.Lock()
	l := m.learned[src]
	if l == nil {
		l = map[netip.Addr]learnedName{}
		m.learned[src] = l
	}
	now := time.Now()
	for a, ln := range l {
		if now.After(ln.until) {
			delete(l, a)
		}
	}
	for _, a := range addrs {
		l[a.addr] = learnedName{name: strings.TrimSuffix(strings.ToLower(name), "."), until: now.Add(a.ttl)}
	}
	m.lmu.Unlock()
	return true, m.fw.learn(src, addrs)
}

// Close stops the DNS filter and the denial logger. With removeAll it also
// removes every sandbox's network and the global state (table, Docker
// rules, bridge, claim, state file) and turns IP forwarding back off if
// agentbox turned it on and no other agentbox network is left; without,
// sandboxes keep their network and policy for the next New (and with no
// sandbox network to keep, the global state goes as with removeAll). Only
// the first call has an effect.
func (m *Manager) Close(removeAll bool) error {
	m.closeOnce.Do(func() { m.closeErr = m.close(removeAll) })
	return m.closeErr
}

func (m *Manager) close(removeAll bool) error {
	m.stopPoll()
	<-m.pollDone
	<-m.watchDone
	m.dns.close()
	if !removeAll {
		m.mu.Lock()
		kept := len(m.st.Sandboxes)
		m.mu.Unlock()
		if kept > 0 {
			// The bridge stays this state directory's: the claim file says
			// so to other managers, and the state file to the next start.
			m.claim.release()
			return nil
		}
		// No sandbox keeps a network: nothing to keep for the next start,
		// and nothing left on the host that needs an owner.
	}
	var errs []error
	if err := m.Reconcile(context.Background(), nil); err != nil {
		errs = append(errs, err)
	}
	if _, err := m.fw.syncDockerUser(false); err != nil {
		errs = append(errs, err)
	}
	if err := m.fw.delete(); err != nil {
		errs = append(errs, err)
	}
	if err := deleteLink(m.cfg.Bridge); err != nil {
		errs = append(errs, err)
	}
	if err := os.Remove(statePath(m.cfg.StateDir)); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	if m.st.NetnsDirBound {
		if err := unix.Unmount(m.cfg.NetnsDir, unix.MNT_DETACH); err != nil {
			errs = append(errs, fmt.Errorf("unmount %s: %w", m.cfg.NetnsDir, err))
		}
	}
	// The directory New made, once empty (a namespace still mounted there
	// keeps it, and its error is reported above).
	if err := os.Remove(m.cfg.NetnsDir); err != nil && !errors.Is(err, os.ErrNotExist) {
		m.log.Debug("netns dir kept", "dir", m.cfg.NetnsDir, "err", err)
	}
	// Under the host lock: a manager starting now must not see forwarding
	// on and then have it turned off under it.
	unlock, err := lockHost(context.Background())
	if err != nil {
		errs = append(errs, err)
		unlock = func() {}
	}
	defer unlock()
	if err := m.claim.remove(); err != nil {
		errs = append(errs, err)
	}
	// Forwarding goes back off when agentbox turned it on and this was the
	// last agentbox network on the host.
	marker := filepath.Join(claimDir, forwardMarker)
	if _, err := os.Stat(marker); err == nil && !otherClaims(m.cfg.Bridge) {
		if err := writeSysctl("net.ipv4.ip_forward", "0"); err != nil {
			errs = append(errs, err)
		} else {
			_ = os.Remove(marker)
		}
	}
	return errors.Join(errs...)
}
