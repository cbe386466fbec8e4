package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// rawResult is one HTTP answer whose body was counted, not kept (responses
// of large-output execs are hundreds of MiB once JSON-escaped).
type rawResult struct {
	status     int
	retryAfter string
	size       int64
	head       []byte // the first bytes of the body, for messages and error codes
	err        error
}

// rawPost sends body (of length n) to the daemon and counts the answer.
// keepAll decodes nothing but keeps the whole body in head.
func (d *daemon) rawPost(ctx context.Context, path, key string, body io.Reader, n int64, keepAll bool) rawResult {
	req, err := http.NewRequestWithContext(ctx, "POST", d.url+path, body)
	if err != nil {
		return rawResult{err: err}
	}
	req.ContentLength = n
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return rawResult{err: err}
	}
	defer resp.Body.Close()
	res := rawResult{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After")}
	limit := int64(4096)
	if keepAll {
		limit = 64 << 20
	}
	var head bytes.Buffer
	m, err := io.Copy(&head, io.LimitReader(resp.Body, limit))
	if err == nil {
		var rest int64
		rest, err = io.Copy(io.Discard, resp.Body)
		m += rest
	}
	res.size, res.head, res.err = m, head.Bytes(), err
	return res
}

// memoryOf returns the kB values of VmHWM and VmRSS of a process.
func memoryOf(t *testing.T, pid int) (hwm, rss int64) {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		switch name {
		case "VmHWM":
			hwm = kb
		case "VmRSS":
			rss = kb
		}
	}
	return hwm, rss
}

// The daemon's memory stays within its documented budget (256 MiB, plus
// REQUEST_MEMORY, default 1G, plus 80 KiB per MAX_CONNECTIONS) under a
// flood of large buffered execs and oversized stdin bodies, excess
// requests get 429 with Retry-After, another user keeps getting answers
// throughout, and the memory goes back to the system afterwards.
func TestSecurityMemoryBudget(t *testing.T) {
	d := startDaemon(t, "API_KEYS=key-alice:alice,key-bob:bob,key-carol:carol", "MAX_CONNECTIONS=512")
	alice := createRaw(t, d, "key-alice", map[string]any{})
	bob := createRaw(t, d, "key-bob", map[string]any{})
	carol := createRaw(t, d, "key-carol", map[string]any{})
	const budgetKB = (256+1024)<<10 + 512*80

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// 17 MiB of NUL bytes on stdout (over the 16 MiB cap, and six bytes
	// each once JSON-escaped) and 16 MiB of letters on stderr.
	const bigOutput = `head -c 17825792 /dev/zero; head -c 16777216 /dev/zero | tr '\0' a >&2`
	execBody, _ := json.Marshal(map[string]any{"cmd": []string{"/bin/sh", "-c", bigOutput}})
	const floods = 20
	results := make(chan rawResult, floods)
	var wg sync.WaitGroup
	for i := 0; i < floods; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results <- d.rawPost(ctx, "/v1/sandboxes/"+alice+"/exec", "key-alice", bytes.NewReader(execBody), int64(len(execBody)), i == 0)
		}()
	}
	// Stdin bodies over the stdin limit (70 MiB) and over the body limit
	// (90 MiB), as in the review.
	bodies := make(chan rawResult, 8)
	for i, size := range []int{70 << 20, 70 << 20, 70 << 20, 70 << 20, 90 << 20, 90 << 20, 90 << 20, 90 << 20} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var b bytes.Buffer
			b.Grow(size + 64)
			fmt.Fprintf(&b, `{"cmd":["cat"],"stdin":"`)
			b.Write(bytes.Repeat([]byte{'x'}, size))
			b.WriteString(`"}`)
			_ = i
			bodies <- d.rawPost(ctx, "/v1/sandboxes/"+carol+"/exec", "key-carol", &b, int64(b.Len()), false)
		}()
	}

	// Bob keeps working while the flood runs.
	small, _ := json.Marshal(map[string]any{"cmd": []string{"echo", "ok"}})
	for i := 0; i < 10; i++ {
		res := d.rawPost(ctx, "/v1/sandboxes/"+bob+"/exec", "key-bob", bytes.NewReader(small), int64(len(small)), true)
		if res.err != nil || res.status != http.StatusOK || !strings.Contains(string(res.head), `"stdout":"ok\n"`) {
			t.Errorf("bob's exec %d during the flood: %d %v %s", i, res.status, res.err, res.head)
		}
		if status, data := d.call(t, "GET", "/healthz", "", nil); status != http.StatusOK {
			t.Errorf("healthz during the flood: %d %s", status, data)
		}
	}
	wg.Wait()
	close(results)
	close(bodies)

	ok, limited := 0, 0
	for res := range results {
		switch {
		case res.err != nil:
			t.Errorf("large exec: %v", res.err)
		case res.status == http.StatusOK:
			ok++
			if res.size < 2*16<<20 {
				t.Errorf("large exec answered only %d bytes", res.size)
			}
			if len(res.head) == int(res.size) {
				checkBigExec(t, res.head)
			}
		case res.status == http.StatusTooManyRequests:
			limited++
			if n, err := strconv.Atoi(res.retryAfter); err != nil || n < 1 {
				t.Errorf("429 without a usable Retry-After (%q): %s", res.retryAfter, res.head)
			}
			if !strings.Contains(string(res.head), `"code":"quota_exceeded"`) {
				t.Errorf("429 body: %s", res.head)
			}
		default:
			t.Errorf("large exec: %d %s", res.status, res.head)
		}
	}
	if ok == 0 || limited == 0 {
		t.Errorf("of %d concurrent large execs of one user, %d succeeded and %d were refused with 429; want some of each", floods, ok, limited)
	}
	for res := range bodies {
		if res.err != nil && !errors.Is(res.err, context.Canceled) {
			// The daemon may answer 413 and close before the whole body
			// went out; the client then reports a broken pipe.
			t.Logf("oversized stdin: %v", res.err)
			continue
		}
		if res.status != http.StatusRequestEntityTooLarge && res.status != http.StatusTooManyRequests {
			t.Errorf("oversized stdin: %d %s", res.status, res.head)
		}
	}
	hwm, rss := memoryOf(t, d.cmd.Process.Pid)
	t.Logf("daemon memory: peak %d MiB, now %d MiB (budget %d MiB)", hwm>>10, rss>>10, budgetKB>>10)
	if hwm > budgetKB {
		t.Errorf("daemon peak RSS %d MiB is over the documented budget of %d MiB", hwm>>10, budgetKB>>10)
	}
	// What the flood used goes back to the system once it is over.
	const idleKB = 384 << 10
	for deadline := time.Now().Add(30 * time.Second); rss > idleKB && time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		_, rss = memoryOf(t, d.cmd.Process.Pid)
	}
	t.Logf("daemon memory after the flood: %d MiB", rss>>10)
	if rss > idleKB {
		t.Errorf("daemon still holds %d MiB 30s after the flood; want at most %d MiB", rss>>10, idleKB>>10)
	}
	// The next request of the flooding user is served again.
	res := d.rawPost(ctx, "/v1/sandboxes/"+alice+"/exec", "key-alice", bytes.NewReader(small), int64(len(small)), true)
	if res.status != http.StatusOK {
		t.Errorf("alice after the flood: %d %v %s", res.status, res.err, res.head)
	}
}

// checkBigExec checks the content of one large buffered exec answer.
func checkBigExec(t *testing.T, body []byte) {
	t.Helper()
	var out struct {
		Stdout, Stderr string
		Truncated      bool
		ExitCode       int `json:"exit_code"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		t.Errorf("large exec answer is not JSON: %v", err)
		return
	}
	if len(out.Stdout) != 16<<20 || strings.Trim(out.Stdout, "\x00") != "" || !out.Truncated {
		t.Errorf("stdout: %d bytes, truncated %v; want 16 MiB of NUL, truncated", len(out.Stdout), out.Truncated)
	}
	if out.Stderr != strings.Repeat("a", 16<<20) || out.ExitCode != 0 {
		t.Errorf("stderr: %d bytes, exit %d; want 16 MiB of 'a', exit 0", len(out.Stderr), out.ExitCode)
	}
}

// slowConn is a connection that sent only part of a request header.
type slowConn struct {
	c      net.Conn
	closed bool
}

// isClosed reports whether the daemon closed c (reads give EOF or a reset
// instead of waiting).
func (s *slowConn) isClosed() bool {
	if s.closed {
		return true
	}
	_ = s.c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	var b [1]byte
	_, err := s.c.Read(b[:])
	var ne net.Error
	if err != nil && !(errors.As(err, &ne) && ne.Timeout()) {
		s.closed = true
	}
	return s.closed
}

// dialFrom connects to the daemon from the loopback address src. A
// connection over a cap may be reset before the dial even returns: that
// is a nil conn and a reset error.
func (d *daemon) dialFrom(t *testing.T, src string) (net.Conn, error) {
	t.Helper()
	dialer := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c, err := dialer.Dial("tcp", strings.TrimPrefix(d.url, "http://"))
	if err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("dial from %s: %v", src, err)
	}
	return c, err
}

// getFrom does GET path from the loopback address src.
func (d *daemon) getFrom(t *testing.T, src, path, key string) (int, string) {
	t.Helper()
	tr := &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}).DialContext}
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", d.url+path, nil)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Slow-header connections beyond the per-address cap are closed at once,
// the rest when the header timeout ends, a stalled request body is cut by
// the body timeout, and other addresses are served throughout.
func TestSecurityConnectionLimits(t *testing.T) {
	const perIP, extra = 16, 24
	d := startDaemon(t, "API_KEYS=key-alice:alice", "MAX_CONNECTIONS=64",
		fmt.Sprintf("MAX_CONNECTIONS_PER_IP=%d", perIP), "HEADER_TIMEOUT=15", "BODY_TIMEOUT=3")
	host := strings.TrimPrefix(d.url, "http://")

	conns := make([]*slowConn, 0, perIP+extra)
	defer func() {
		for _, c := range conns {
			if c.c != nil {
				c.c.Close()
			}
		}
	}()
	for i := 0; i < perIP+extra; i++ {
		// An address of its own: the harness's keep-alive connections
		// come from 127.0.0.1 and would take slots.
		c, err := d.dialFrom(t, "127.0.0.4")
		if err != nil {
			conns = append(conns, &slowConn{closed: true})
			continue
		}
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\nX-Slow: ", host)
		conns = append(conns, &slowConn{c: c})
	}
	count := func() (closed int) {
		for _, c := range conns {
			if c.isClosed() {
				closed++
			}
		}
		return closed
	}
	closed := 0
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if closed = count(); closed >= extra {
			break
		}
	}
	// Those over the cap went at once; those under it wait for their
	// header timeout (15s), not for a cap.
	if closed != extra {
		t.Errorf("%d of %d slow-header connections from one address were closed early; want the %d over the cap of %d", closed, len(conns), extra, perIP)
	}
	if status, body := d.getFrom(t, "127.0.0.2", "/healthz", ""); status != http.StatusOK {
		t.Errorf("healthz from another address while one address is at its cap: %d %s", status, body)
	}
	if status, body := d.getFrom(t, "127.0.0.2", "/v1/info", "key-alice"); status != http.StatusOK {
		t.Errorf("/v1/info from another address while one address is at its cap: %d %s", status, body)
	}

	// A request whose body stalls is cut after BODY_TIMEOUT.
	stalled, err := d.dialFrom(t, "127.0.0.3")
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	fmt.Fprintf(stalled, "POST /v1/sandboxes HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer key-alice\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"x", host)
	_ = stalled.SetReadDeadline(time.Now().Add(60 * time.Second))
	if resp, err := http.ReadResponse(bufio.NewReader(stalled), nil); err == nil {
		resp.Body.Close()
		if resp.StatusCode < 400 {
			t.Errorf("stalled body answered %s", resp.Status)
		}
	} else {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Errorf("a request body stalled for 60s was not cut by BODY_TIMEOUT=3: %v", err)
		}
	}

	// Every slow-header connection ends with the header timeout.
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		if closed = count(); closed == len(conns) {
			break
		}
	}
	if closed != len(conns) {
		t.Errorf("%d of %d slow-header connections still open 60s after HEADER_TIMEOUT=15", len(conns)-closed, len(conns))
	}
	if status, body := d.getFrom(t, "127.0.0.4", "/healthz", ""); status != http.StatusOK {
		t.Errorf("healthz from the first address once its connections ended: %d %s", status, body)
	}
}
