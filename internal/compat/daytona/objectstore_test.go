package daytona

import (
	"bufio"
	"encoding/xml"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestPushTokens(t *testing.T) {
	o := newObjectStore(t.TempDir(), 0)
	now := time.Now()
	tok := o.token("alice", now)
	if u, ok := o.userOfToken(tok, now); !ok || u != "alice" {
		t.Fatalf("own token: %q %v", u, ok)
	}
	if _, ok := o.userOfToken(tok, now.Add(pushTokenTTL+time.Minute)); ok {
		t.Fatal("an expired token is accepted")
	}
	// The tenant cannot be swapped under the MAC.
	parts := strings.Split(tok, ".")
	forged := strings.Join([]string{"Ym9i", parts[1], parts[2]}, ".") // "bob"
	if _, ok := o.userOfToken(forged, now); ok {
		t.Fatal("a token naming another tenant is accepted")
	}
	if _, ok := newObjectStore(t.TempDir(), 0).userOfToken(tok, now); ok {
		t.Fatal("another replica's key accepts the token")
	}
	for _, bad := range []string{"", "a.b", "a.b.c.d", "!!.1.x"} {
		if _, ok := o.userOfToken(bad, now); ok {
			t.Fatalf("%q accepted", bad)
		}
	}
}

func TestAWSChunked(t *testing.T) {
	body := "5;chunk-signature=x\r\nhello\r\n6\r\n world\r\n0\r\nx-amz-checksum-crc32:AAAA\r\n\r\n"
	got, err := io.ReadAll(&awsChunked{r: bufioReader(body)})
	if err != nil || string(got) != "hello world" {
		t.Fatalf("got %q, %v", got, err)
	}
	if _, err := io.ReadAll(&awsChunked{r: bufioReader("zz\r\n")}); err == nil {
		t.Fatal("a bad chunk size is accepted")
	}
	if _, err := io.ReadAll(&awsChunked{r: bufioReader("10\r\nshort")}); err == nil {
		t.Fatal("a short chunk is accepted")
	}
}

// TestS3Subset drives PutObject and ListObjectsV2 as the AWS SDK sends
// them: the token decides the tenant, keys outside its organization are
// refused.
func TestS3Subset(t *testing.T) {
	s := &Server{objects: newObjectStore(t.TempDir(), 1<<20), log: discardLogger()}
	srv := httptest.NewServer(http.HandlerFunc(s.serveS3))
	defer srv.Close()
	tok := s.objects.token("alice", time.Now())
	org := orgOf("alice")
	hash := strings.Repeat("ab", 16)
	do := func(method, path, token, body string) (int, string) {
		req, _ := http.NewRequest(method, srv.URL+Prefix+s3Path+path, strings.NewReader(body))
		if token != "" {
			req.Header.Set("X-Amz-Security-Token", token)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	list := "/" + s3Bucket + "?list-type=2&max-keys=1&prefix=" + org + "/" + hash + "/"
	if code, body := do("GET", list, tok, ""); code != 200 || strings.Contains(body, "<Contents>") {
		t.Fatalf("empty list: %d %s", code, body)
	}
	key := "/" + s3Bucket + "/" + org + "/" + hash + "/context.tar"
	if code, _ := do("PUT", key, "", "x"); code != 403 {
		t.Fatalf("no token: %d", code)
	}
	if code, _ := do("PUT", "/"+s3Bucket+"/"+orgOf("bob")+"/"+hash+"/context.tar", tok, "x"); code != 403 {
		t.Fatalf("another organization's key: %d", code)
	}
	if code, body := do("PUT", key, tok, "tar bytes"); code != 200 {
		t.Fatalf("put: %d %s", code, body)
	}
	if b, err := os.ReadFile(filepath.Join(s.objects.dir, org, hash, "context.tar")); err != nil || string(b) != "tar bytes" {
		t.Fatalf("stored %q %v", b, err)
	}
	if code, body := do("GET", list, tok, ""); code != 200 || !strings.Contains(body, "<Key>"+org+"/"+hash+"/context.tar</Key>") {
		t.Fatalf("list after put: %d %s", code, body)
	}
	if code, _ := do("PUT", key, tok, strings.Repeat("x", 2<<20)); code != 413 {
		t.Fatalf("over the limit: %d", code)
	}
	// A multipart upload, as lib-storage sends a context over 5 MiB.
	code, body := do("POST", key+"?uploads", tok, "")
	var init struct {
		UploadID string `xml:"UploadId"`
	}
	if err := xml.Unmarshal([]byte(body), &init); code != 200 || err != nil || init.UploadID == "" {
		t.Fatalf("create multipart: %d %s %v", code, body, err)
	}
	for n, part := range map[int]string{2: "world", 1: "hello "} {
		if code, body := do("PUT", key+"?partNumber="+strconv.Itoa(n)+"&uploadId="+init.UploadID, tok, part); code != 200 {
			t.Fatalf("part %d: %d %s", n, code, body)
		}
	}
	if code, _ := do("PUT", key+"?partNumber=1&uploadId="+strings.Repeat("0", 32), tok, "x"); code != 404 {
		t.Fatalf("part of an unknown upload: %d", code)
	}
	complete := `<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>"a"</ETag></Part><Part><PartNumber>2</PartNumber><ETag>"b"</ETag></Part></CompleteMultipartUpload>`
	if code, body := do("POST", key+"?uploadId="+init.UploadID, tok, complete); code != 200 {
		t.Fatalf("complete: %d %s", code, body)
	}
	if b, err := os.ReadFile(filepath.Join(s.objects.dir, org, hash, "context.tar")); err != nil || string(b) != "hello world" {
		t.Fatalf("joined %q %v", b, err)
	}
	if code, _ := do("GET", "/"+s3Bucket+"/"+org+"/"+hash+"/context.tar", tok, ""); code != 501 {
		t.Fatalf("GetObject: %d", code)
	}
}

func bufioReader(s string) *bufio.Reader { return bufio.NewReader(strings.NewReader(s)) }

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
