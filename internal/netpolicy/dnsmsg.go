package netpolicy

import (
	"errors"
	"net/netip"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// query is the part of a DNS query the filter decides on.
type query struct {
	header   dnsmessage.Header
	question dnsmessage.Question
	name     string // question name without the trailing dot
}

var errNotQuery = errors.New("not a DNS query")

// parseQuery parses a query. It returns errNotQuery for messages that must
// not be answered at all (responses, garbage shorter than a header) and
// another error, with the header filled in, for queries to answer FORMERR.
func parseQuery(msg []byte) (query, error) {
	var p dnsmessage.Parser
	h, err := p.Start(msg)
	if err != nil || h.Response {
		return query{}, errNotQuery
	}
	q := query{header: h}
	qs, err := p.AllQuestions()
	if err != nil {
		return q, err
	}
	if len(qs) != 1 {
		return q, errors.New("want exactly one question")
	}
	q.question = qs[0]
	n := q.question.Name.String()
	if len(n) > 1 {
		n = n[:len(n)-1]
	}
	q.name = n
	return q, nil
}

// reply builds an answer-less response to q with the given code. withQ
// echoes the question (not possible when it failed to parse).
func reply(q query, rcode dnsmessage.RCode, withQ bool) []byte {
	b := dnsmessage.NewBuilder(make([]byte, 0, 512), dnsmessage.Header{
		ID:                 q.header.ID,
		Response:           true,
		OpCode:             q.header.OpCode,
		RecursionDesired:   q.header.RecursionDesired,
		RecursionAvailable: true,
		RCode:              rcode,
	})
	if withQ {
		if err := b.StartQuestions(); err == nil {
			_ = b.Question(q.question)
		}
	}
	msg, err := b.Finish()
	if err != nil {
		return nil
	}
	return msg
}

// learnedAddr is an IPv4 address from an answer and how long it stays
// allowed.
type learnedAddr struct {
	addr netip.Addr
	ttl  time.Duration
}

// answerAddrs checks that resp answers q and returns its A records (with
// their TTLs), including those at the end of a CNAME chain.
func answerAddrs(resp []byte, q query) ([]learnedAddr, dnsmessage.RCode, error) {
	var p dnsmessage.Parser
	h, err := p.Start(resp)
	if err != nil {
		return nil, 0, err
	}
	if !h.Response || h.ID != q.header.ID {
		return nil, 0, errors.New("response does not match the query")
	}
	qs, err := p.AllQuestions()
	if err != nil {
		return nil, 0, err
	}
	if len(qs) != 1 || qs[0].Type != q.question.Type || qs[0].Class != q.question.Class ||
		!equalFoldASCII(qs[0].Name.String(), q.question.Name.String()) {
		return nil, 0, errors.New("response is for another question")
	}
	var out []learnedAddr
	for {
		rh, err := p.AnswerHeader()
		if errors.Is(err, dnsmessage.ErrSectionDone) {
			break
		}
		if err != nil {
			return nil, 0, err
		}
		if rh.Type != dnsmessage.TypeA || rh.Class != dnsmessage.ClassINET {
			if err := p.SkipAnswer(); err != nil {
				return nil, 0, err
			}
			continue
		}
		a, err := p.AResource()
		if err != nil {
			return nil, 0, err
		}
		out = append(out, learnedAddr{addr: netip.AddrFrom4(a.A), ttl: time.Duration(rh.TTL) * time.Second})
	}
	return out, h.RCode, nil
}

func equalFoldASCII(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		ca, cb := a[i], b[i]
		if 'A' <= ca && ca <= 'Z' {
			ca += 'a' - 'A'
		}
		if 'A' <= cb && cb <= 'Z' {
			cb += 'a' - 'A'
		}
		if ca != cb {
			return false
		}
	}
	return true
}
