package netpolicy

import (
	"bytes"
	"strings"
	"testing"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// wireName decodes the question name of msg label by label (following
// compression pointers), independently of dnsmessage.
func wireName(msg []byte) ([]string, bool) {
	var labels []string
	off := 12
	for hops := 0; hops < 16; {
		if off >= len(msg) {
			return nil, false
		}
		l := int(msg[off])
		switch {
		case l == 0:
			return labels, true
		case l&0xC0 == 0xC0:
			if off+1 >= len(msg) {
				return nil, false
			}
			off = (l&0x3F)<<8 | int(msg[off+1])
			hops++
			continue
		case l&0xC0 != 0:
			return nil, false
		}
		if off+1+l > len(msg) {
			return nil, false
		}
		labels = append(labels, string(msg[off+1:off+1+l]))
		off += 1 + l
	}
	return nil, false
}

func dnsQuery(name string, typ dnsmessage.Type) []byte {
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 0x1234, RecursionDesired: true})
	_ = b.StartQuestions()
	_ = b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: typ, Class: dnsmessage.ClassINET})
	msg, _ := b.Finish()
	return msg
}

// FuzzDNSQuery feeds arbitrary datagrams to the egress filter's query
// parser. For every query it accepts, the name the policy is matched
// against is exactly the name the upstream resolver will look up (no label
// hides a dot), and the reply it builds is a well-formed response to that
// query: same ID, response bit, the question echoed.
func FuzzDNSQuery(f *testing.F) {
	f.Add(dnsQuery("example.com.", dnsmessage.TypeA))
	f.Add(dnsQuery("sub.Allowed.EXAMPLE.org.", dnsmessage.TypeAAAA))
	f.Add(dnsQuery(".", dnsmessage.TypeA))
	// One label "allowed.example.org" under ".evil": the filter must not
	// read it as allowed.example.org.
	evil := dnsQuery("x.evil.", dnsmessage.TypeA)
	f.Add(bytes.Replace(evil, []byte("\x01x\x04evil"), []byte("\x13allowed.example.org\x04evil"), 1))
	// A compression pointer loop in the question.
	loop := append(append([]byte{}, evil[:12]...), 0xC0, 12, 0, 1, 0, 1)
	f.Add(loop)
	f.Add([]byte{0x12, 0x34, 0x80, 0, 0, 1, 0, 0, 0, 0, 0, 0}) // a response
	f.Add([]byte{1, 2, 3})
	allow, err := parsePolicy(sandbox.Network{AllowOut: []string{"allowed.example.org", "*.example.net"}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		q, err := parseQuery(msg)
		if err == errNotQuery {
			return
		}
		if err != nil {
			if r := reply(q, dnsmessage.RCodeFormatError, false); r != nil {
				checkReply(t, r, q, false)
			}
			return
		}
		labels, ok := wireName(msg)
		if !ok {
			t.Fatalf("%q: parsed, but its name does not decode", msg)
		}
		for _, l := range labels {
			if strings.Contains(l, ".") {
				t.Fatalf("%q: accepted a label with a dot: %q", msg, l)
			}
		}
		if got := strings.Join(labels, "."); got != q.name && !(got == "" && q.name == ".") { // the root prints as "."
			t.Fatalf("%q: filter sees %q, the wire says %q", msg, q.name, got)
		}
		if allow.nameAllowed(q.name) {
			low := strings.ToLower(q.name)
			if low != "allowed.example.org" && !strings.HasSuffix(low, ".example.net") {
				t.Fatalf("%q allowed by a policy that does not list it", q.name)
			}
		}
		checkReply(t, reply(q, dnsmessage.RCodeNameError, true), q, true)
	})
}

func checkReply(t *testing.T, r []byte, q query, withQ bool) {
	t.Helper()
	var p dnsmessage.Parser
	h, err := p.Start(r)
	if err != nil {
		t.Fatalf("reply does not parse: %v", err)
	}
	if !h.Response || h.ID != q.header.ID {
		t.Fatalf("reply header %+v for query %+v", h, q.header)
	}
	qs, err := p.AllQuestions()
	if err != nil {
		t.Fatalf("reply questions: %v", err)
	}
	if withQ && (len(qs) != 1 || qs[0] != q.question) {
		t.Fatalf("reply echoes %v, want %v", qs, q.question)
	}
}

// FuzzDNSAnswer feeds arbitrary upstream answers to the code that learns
// addresses from them: an answer to another ID or question teaches
// nothing, and at most one address is learned per 16 bytes of answer.
func FuzzDNSAnswer(f *testing.F) {
	q, err := parseQuery(dnsQuery("allowed.example.org.", dnsmessage.TypeA))
	if err != nil {
		f.Fatal(err)
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 0x1234, Response: true})
	_ = b.StartQuestions()
	_ = b.Question(q.question)
	_ = b.StartAnswers()
	_ = b.CNAMEResource(dnsmessage.ResourceHeader{Name: q.question.Name, Class: dnsmessage.ClassINET, TTL: 60},
		dnsmessage.CNAMEResource{CNAME: dnsmessage.MustNewName("cdn.example.")})
	_ = b.AResource(dnsmessage.ResourceHeader{Name: dnsmessage.MustNewName("cdn.example."), Class: dnsmessage.ClassINET, TTL: 30},
		dnsmessage.AResource{A: [4]byte{192, 0, 2, 1}})
	good, _ := b.Finish()
	f.Add(good)
	f.Add(good[:len(good)-3])
	f.Add(dnsQuery("allowed.example.org.", dnsmessage.TypeA))
	f.Fuzz(func(t *testing.T, resp []byte) {
		addrs, _, err := answerAddrs(resp, q)
		if err != nil {
			if len(addrs) != 0 {
				t.Fatalf("error %v with %d addresses", err, len(addrs))
			}
			return
		}
		if len(addrs) > len(resp)/16 {
			t.Fatalf("%d addresses from %d bytes", len(addrs), len(resp))
		}
		var p dnsmessage.Parser
		h, _ := p.Start(resp)
		if h.ID != q.header.ID || !h.Response {
			t.Fatalf("learned from an answer with header %+v", h)
		}
		for _, a := range addrs {
			if !a.addr.Is4() {
				t.Fatalf("learned %v", a.addr)
			}
		}
	})
}

// FuzzPolicyEntries: allow/deny entries from the API. Whatever is
// accepted is an IPv4 prefix or a lower-case host name pattern; a name
// pattern never matches a name that does not end with it.
func FuzzPolicyEntries(f *testing.F) {
	for _, s := range []string{"10.0.0.0/8", "::1", "*.Example.COM.", "a..b", "-a.com", "*.*.x", "1.2.3.4", "x_y.test", "é.com", strings.Repeat("a.", 130)} {
		f.Add(s, "sub.example.com")
	}
	f.Fuzz(func(t *testing.T, entry, name string) {
		nets, names, err := parseEntry(entry, false)
		if err != nil {
			if sandbox.ClassOf(Validate(sandbox.Network{Mode: sandbox.NetworkEgress, AllowOut: []string{entry}})) != sandbox.ClassInvalid {
				t.Fatalf("%q: parseEntry fails (%v) but Validate does not say invalid", entry, err)
			}
			return
		}
		for _, n := range nets {
			if !n.Addr().Is4() {
				t.Fatalf("%q: allowed non-IPv4 %v", entry, n)
			}
		}
		for _, p := range names {
			if p.name == "" || p.name != strings.ToLower(p.name) || strings.Contains(p.name, "*") {
				t.Fatalf("%q: pattern %+v", entry, p)
			}
			if p.match(name) && !strings.HasSuffix(name, p.name) {
				t.Fatalf("%q matches %q", entry, name)
			}
		}
	})
}
