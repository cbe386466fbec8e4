package netpolicy

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// dnsPolicySource is what the DNS filter needs from the manager.
type dnsPolicySource interface {
	// dnsPolicy returns the policy of the sandbox with address src.
	dnsPolicy(src netip.Addr) (policy, bool)
	// learn allows src to reach addrs (resolved for name) for their TTL,
	// if src's current policy still allows name and learns addresses. It
	// must be done before the answer reaches the sandbox, or the sandbox's
	// first connect could race it. allowed is false if name is denied now.
	learn(src netip.Addr, name string, addrs []learnedAddr) (allowed bool, err error)
}

// Bounds on the TTL for which a resolved address stays allowed: at least a
// minute so a sandbox can use an answer with a tiny TTL, at most a day.
const (
	minLearnTTL = time.Minute
	maxLearnTTL = 24 * time.Hour
)

const (
	maxTCPConns     = 64
	tcpIdleTimeout  = 10 * time.Second
	maxDNSMsgSize   = 65535
	maxTCPQueryWait = 5 * time.Second
)

// dnsFilter is the DNS server on the bridge address (UDP and TCP port 53).
type dnsFilter struct {
	log      *slog.Logger
	src      dnsPolicySource
	upstream []netip.AddrPort
	timeout  time.Duration
	sem      chan struct{} // bounds forwarded queries in flight
	tcpSem   chan struct{} // bounds open TCP connections
	limiter  *rateLimiter

	udp *net.UDPConn
	tcp *net.TCPListener

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

type dnsConfig struct {
	listen      netip.Addr
	upstream    []netip.AddrPort
	timeout     time.Duration
	rate        int
	concurrency int
	log         *slog.Logger
}

// startDNS binds both sockets and serves until close.
func startDNS(c dnsConfig, src dnsPolicySource) (*dnsFilter, error) {
	ap := netip.AddrPortFrom(c.listen, 53)
	udp, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(ap))
	if err != nil {
		return nil, fmt.Errorf("dns filter: %w", err)
	}
	tcp, err := net.ListenTCP("tcp4", net.TCPAddrFromAddrPort(ap))
	if err != nil {
		udp.Close()
		return nil, fmt.Errorf("dns filter: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &dnsFilter{
		log: c.log, src: src, upstream: c.upstream, timeout: c.timeout,
		sem: make(chan struct{}, c.concurrency), tcpSem: make(chan struct{}, maxTCPConns),
		limiter: newRateLimiter(c.rate), udp: udp, tcp: tcp, ctx: ctx, cancel: cancel,
	}
	d.wg.Add(2)
	go d.serveUDP()
	go d.serveTCP()
	return d, nil
}

// close stops serving and waits for queries in flight.
func (d *dnsFilter) close() {
	d.cancel()
	d.udp.Close()
	d.tcp.Close()
	d.wg.Wait()
}

func (d *dnsFilter) serveUDP() {
	defer d.wg.Done()
	buf := make([]byte, maxDNSMsgSize)
	for {
		n, from, err := d.udp.ReadFromUDPAddrPort(buf)
		if err != nil {
			if d.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		msg := append([]byte(nil), buf[:n]...)
		src := from.Addr().Unmap()
		resp, q, forward := d.decide(src, msg)
		if !forward {
			if resp != nil {
				_, _ = d.udp.WriteToUDPAddrPort(resp, from)
			}
			continue
		}
		select {
		case d.sem <- struct{}{}:
		default:
			// Overloaded: fail this query now rather than queue it.
			_, _ = d.udp.WriteToUDPAddrPort(reply(q, dnsmessage.RCodeServerFailure, true), from)
			continue
		}
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			defer func() { <-d.sem }()
			if resp := d.forward(src, msg, q, false); resp != nil {
				_, _ = d.udp.WriteToUDPAddrPort(resp, from)
			}
		}()
	}
}

func (d *dnsFilter) serveTCP() {
	defer d.wg.Done()
	for {
		c, err := d.tcp.AcceptTCP()
		if err != nil {
			if d.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		select {
		case d.tcpSem <- struct{}{}:
		default:
			c.Close()
			continue
		}
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			defer func() { <-d.tcpSem }()
			d.serveTCPConn(c)
		}()
	}
}

// serveTCPConn answers length-prefixed queries one after the other until
// the client is idle for tcpIdleTimeout or the filter stops.
func (d *dnsFilter) serveTCPConn(c *net.TCPConn) {
	defer c.Close()
	stop := context.AfterFunc(d.ctx, func() { c.Close() })
	defer stop()
	ra, ok := c.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return
	}
	src := ra.AddrPort().Addr().Unmap()
	for {
		_ = c.SetDeadline(time.Now().Add(tcpIdleTimeout))
		msg, err := readTCPMsg(c)
		if err != nil {
			return
		}
		resp, q, forward := d.decide(src, msg)
		if forward {
			select {
			case d.sem <- struct{}{}:
				resp = d.forward(src, msg, q, true)
				<-d.sem
			default:
				resp = reply(q, dnsmessage.RCodeServerFailure, true)
			}
		}
		if resp == nil {
			return
		}
		if err := writeTCPMsg(c, resp); err != nil {
			return
		}
	}
}

func readTCPMsg(r io.Reader) ([]byte, error) {
	var l [2]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		return nil, err
	}
	msg := make([]byte, binary.BigEndian.Uint16(l[:]))
	if _, err := io.ReadFull(r, msg); err != nil {
		return nil, err
	}
	return msg, nil
}

func writeTCPMsg(w io.Writer, msg []byte) error {
	if len(msg) > maxDNSMsgSize {
		return errors.New("dns message too large")
	}
	b := make([]byte, 2+len(msg))
	binary.BigEndian.PutUint16(b, uint16(len(msg)))
	copy(b[2:], msg)
	_, err := w.Write(b)
	return err
}

// decide answers what can be answered locally. forward is true when the
// query must go upstream; otherwise resp is the answer (nil: no answer).
func (d *dnsFilter) decide(src netip.Addr, msg []byte) (resp []byte, q query, forward bool) {
	q, err := parseQuery(msg)
	if errors.Is(err, errNotQuery) {
		return nil, q, false
	}
	p, known := d.src.dnsPolicy(src)
	if !known {
		return reply(q, dnsmessage.RCodeRefused, err == nil), q, false
	}
	if !d.limiter.allow(src, time.Now()) {
		return reply(q, dnsmessage.RCodeRefused, err == nil), q, false
	}
	if err != nil {
		return reply(q, dnsmessage.RCodeFormatError, false), q, false
	}
	if q.header.OpCode != 0 {
		return reply(q, dnsmessage.RCodeNotImplemented, true), q, false
	}
	if !p.nameAllowed(q.name) {
		d.log.Debug("dns query denied", "src", src, "name", q.name, "type", q.question.Type)
		return reply(q, dnsmessage.RCodeNameError, true), q, false
	}
	if q.question.Type == dnsmessage.TypeAAAA {
		// IPv6 is not available to sandboxes: an empty answer makes clients
		// use the A records at once instead of trying IPv6 first.
		return reply(q, dnsmessage.RCodeSuccess, true), q, false
	}
	return nil, q, true
}

// forward sends msg upstream, learns the addresses of the answer when the
// sandbox's policy is an allow list, and returns the answer for the client.
func (d *dnsFilter) forward(src netip.Addr, msg []byte, q query, tcp bool) []byte {
	resp, err := d.exchange(msg, tcp)
	if err != nil {
		d.log.Debug("dns upstream failed", "src", src, "name", q.name, "err", err)
		return reply(q, dnsmessage.RCodeServerFailure, true)
	}
	addrs, _, err := answerAddrs(resp, q)
	if err != nil {
		d.log.Debug("dns upstream answer rejected", "src", src, "name", q.name, "err", err)
		return reply(q, dnsmessage.RCodeServerFailure, true)
	}
	// The policy may have changed while the query was upstream; learn
	// re-checks it.
	for i := range addrs {
		addrs[i].ttl = min(max(addrs[i].ttl, minLearnTTL), maxLearnTTL)
	}
	allowed, err := d.src.learn(src, q.name, addrs)
	if err != nil {
		d.log.Warn("dns filter: allowing resolved addresses failed", "src", src, "name", q.name, "err", err)
		return reply(q, dnsmessage.RCodeServerFailure, true)
	}
	if !allowed {
		return reply(q, dnsmessage.RCodeNameError, true)
	}
	return resp
}

// exchange tries each upstream in turn, each bounded by the timeout. The
// query goes out with a fresh random ID (restored in the answer) so an
// off-path spoofer cannot guess it from the sandbox's query.
func (d *dnsFilter) exchange(msg []byte, tcp bool) ([]byte, error) {
	clientID := binary.BigEndian.Uint16(msg)
	out := append([]byte(nil), msg...)
	id := randomID()
	binary.BigEndian.PutUint16(out, id)
	var errs []error
	for _, up := range d.upstream {
		ctx, cancel := context.WithTimeout(d.ctx, d.timeout)
		resp, err := exchangeOne(ctx, up, out, id, tcp)
		cancel()
		if err == nil {
			binary.BigEndian.PutUint16(resp, clientID)
			return resp, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", up, err))
		if d.ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

// exchangeOne does one query/answer exchange with one server.
func exchangeOne(ctx context.Context, server netip.AddrPort, msg []byte, id uint16, tcp bool) ([]byte, error) {
	network := "udp"
	if tcp {
		network = "tcp"
	}
	var dialer net.Dialer
	c, err := dialer.DialContext(ctx, network, server.String())
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if tcp {
		if err := writeTCPMsg(c, msg); err != nil {
			return nil, err
		}
		resp, err := readTCPMsg(c)
		if err != nil {
			return nil, err
		}
		if len(resp) < 12 || binary.BigEndian.Uint16(resp) != id {
			return nil, errors.New("answer with wrong id")
		}
		return resp, nil
	}
	if _, err := c.Write(msg); err != nil {
		return nil, err
	}
	buf := make([]byte, maxDNSMsgSize)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return nil, err
		}
		// Ignore stray datagrams with another ID; the deadline bounds this.
		if n >= 12 && binary.BigEndian.Uint16(buf) == id {
			return append([]byte(nil), buf[:n]...), nil
		}
	}
}

func randomID() uint16 {
	var b [2]byte
	_, _ = rand.Read(b[:])
	return binary.BigEndian.Uint16(b[:])
}
