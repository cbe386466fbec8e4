package daytona

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// The SDK's Image.addLocalFile, addLocalDir, fromDockerfile and
// dockerfileCommands carry local files: before a build it asks
// GET /object-storage/push-access for S3 credentials and uploads each
// source, a tar, with the AWS SDK to <bucket>/<organizationId>/<md5>/context.tar
// (first listing the prefix: an upload already there is not sent again);
// the build then names the md5s in buildInfo.contextHashes. agentbox
// serves the S3 calls that takes (ListObjectsV2, PutObject, and the
// multipart upload of a context over the SDK's part size, 5 MiB) under
// /api/object-storage/s3, keeping each tenant's uploads in a directory of
// its own.
//
// The S3 requests carry no bearer key: the credentials' session token
// (X-Amz-Security-Token, sent with every request) is the authority, an
// HMAC of the tenant and an expiry under a key of this replica; the SigV4
// signature itself is not checked (the secret is handed out with the
// token anyway).

const (
	// s3Path is where the S3 subset lives below Prefix.
	s3Path = "/object-storage/s3"
	// s3Bucket is the one bucket.
	s3Bucket = "agentbox-contexts"
	// pushTokenTTL is how long push credentials work.
	pushTokenTTL = time.Hour
	// maxContextAge is how long an uploaded context is kept.
	maxContextAge = 24 * time.Hour
)

var contextKey = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^(o[0-9a-f]{16})/([0-9a-f]{32})/context\.tar$`)
})

// objectStore keeps the uploaded contexts under dir/<org>/<md5>/context.tar.
type objectStore struct {
	dir      string
	key      []byte
	maxBytes int64
}

func newObjectStore(dir string, maxBytes int64) *objectStore {
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	if maxBytes <= 0 {
		maxBytes = 1 << 30
	}
	return &objectStore{dir: dir, key: k, maxBytes: maxBytes}
}

// orgOf is a tenant's organization ID in the object store: a hash, as
// user names need not be path components.
func orgOf(user string) string {
	sum := sha256.Sum256([]byte("daytona-org\x00" + user))
	return "o" + hex.EncodeToString(sum[:8])
}

func (o *objectStore) mac(user string, exp int64) []byte {
	m := hmac.New(sha256.New, o.key)
	fmt.Fprintf(m, "%s\x00%d", user, exp)
	return m.Sum(nil)
}

func (o *objectStore) token(user string, now time.Time) string {
	exp := now.Add(pushTokenTTL).Unix()
	return base64.RawURLEncoding.EncodeToString([]byte(user)) + "." + strconv.FormatInt(exp, 10) + "." +
		base64.RawURLEncoding.EncodeToString(o.mac(user, exp))
}

// userOfToken checks a session token and returns its tenant.
func (o *objectStore) userOfToken(tok string, now time.Time) (string, bool) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return "", false
	}
	u, err1 := base64.RawURLEncoding.DecodeString(parts[0])
	exp, err2 := strconv.ParseInt(parts[1], 10, 64)
	mac, err3 := base64.RawURLEncoding.DecodeString(parts[2])
	if err1 != nil || err2 != nil || err3 != nil || now.Unix() > exp {
		return "", false
	}
	if subtle.ConstantTimeCompare(mac, o.mac(string(u), exp)) != 1 {
		return "", false
	}
	return string(u), true
}

func (o *objectStore) path(org, hash string) string {
	return filepath.Join(o.dir, org, hash, "context.tar")
}

// sweep removes contexts older than maxContextAge.
func (o *objectStore) sweep(now time.Time) {
	orgs, _ := os.ReadDir(o.dir)
	for _, org := range orgs {
		hashes, _ := os.ReadDir(filepath.Join(o.dir, org.Name()))
		for _, h := range hashes {
			if info, err := h.Info(); err == nil && now.Sub(info.ModTime()) > maxContextAge {
				os.RemoveAll(filepath.Join(o.dir, org.Name(), h.Name()))
			}
		}
	}
}

// unpackContexts lays user's uploaded contexts hashes, in order, into dir.
func (o *objectStore) unpackContexts(ctx context.Context, user string, hashes []string, dir string) error {
	if len(hashes) > 1000 {
		return sandbox.Invalid("contextHashes", "at most 1000 contexts")
	}
	org := orgOf(user)
	for _, h := range hashes {
		if !contextKey().MatchString(org + "/" + h + "/context.tar") {
			return sandbox.Invalid("contextHashes", "context hash %q: want 32 hex digits", h)
		}
		p := o.path(org, h)
		if _, err := os.Stat(p); err != nil {
			return sandbox.Invalid("contextHashes", "context %s was not uploaded (or has expired)", h)
		}
		if err := unpackInto(ctx, p, dir, 4*o.maxBytes); err != nil {
			return err
		}
	}
	return nil
}

// pushAccess is GET /object-storage/push-access.
func (s *Server) pushAccess(w http.ResponseWriter, r *http.Request, user string) error {
	if err := s.requireBuilds(user); err != nil {
		return err
	}
	now := time.Now()
	go s.objects.sweep(now)
	writeJSON(w, http.StatusOK, map[string]string{"accessKey": "agentbox", "secret": "agentbox-" + orgOf(user),
		"sessionToken": s.objects.token(user, now), "storageUrl": baseURL(r) + Prefix + s3Path,
		"organizationId": orgOf(user), "bucket": s3Bucket, "region": "us-east-1"})
	return nil
}

type s3Error struct {
	XMLName xml.Name `xml:"Error"`
	Code    string   `xml:"Code"`
	Message string   `xml:"Message"`
}

func writeS3Error(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	_ = xml.NewEncoder(w).Encode(s3Error{Code: code, Message: msg})
}

type s3ListResult struct {
	XMLName     xml.Name   `xml:"ListBucketResult"`
	Xmlns       string     `xml:"xmlns,attr"`
	Name        string     `xml:"Name"`
	Prefix      string     `xml:"Prefix"`
	KeyCount    int        `xml:"KeyCount"`
	MaxKeys     int        `xml:"MaxKeys"`
	IsTruncated bool       `xml:"IsTruncated"`
	Contents    []s3Object `xml:"Contents"`
}

type s3Object struct {
	Key          string `xml:"Key"`
	Size         int64  `xml:"Size"`
	LastModified string `xml:"LastModified"`
}

// serveS3 answers the S3 subset. It is registered without the bearer
// check: the session token authenticates.
func (s *Server) serveS3(w http.ResponseWriter, r *http.Request) {
	tok := r.Header.Get("X-Amz-Security-Token")
	if tok == "" {
		tok = r.URL.Query().Get("X-Amz-Security-Token")
	}
	user, ok := s.objects.userOfToken(tok, time.Now())
	if !ok {
		writeS3Error(w, http.StatusForbidden, "AccessDenied", "missing, invalid or expired session token (ask GET /api/object-storage/push-access)")
		return
	}
	org := orgOf(user)
	rest := strings.TrimPrefix(r.URL.Path, Prefix+s3Path+"/")
	bucket, key, _ := strings.Cut(rest, "/")
	if bucket != s3Bucket {
		writeS3Error(w, http.StatusNotFound, "NoSuchBucket", "the bucket is "+s3Bucket)
		return
	}
	q := r.URL.Query()
	switch {
	case r.Method == http.MethodGet && key == "" && q.Get("list-type") == "2":
		s.s3List(w, org, q.Get("prefix"))
	case r.Method == http.MethodPut && key != "" || r.Method == http.MethodPost && key != "" || r.Method == http.MethodDelete && q.Get("uploadId") != "":
		if err := s.s3Write(w, r, org, key); err != nil {
			var se *sandbox.Error
			msg := "internal error"
			status, code := http.StatusInternalServerError, "InternalError"
			if errors.As(err, &se) {
				msg, status, code = se.Msg, statusOfErr(err), "InvalidRequest"
				if se.Class == sandbox.ClassTooLarge {
					code = "EntityTooLarge"
				}
			} else {
				s.log.Error("daytona context upload failed", "err", err)
			}
			writeS3Error(w, status, code, msg)
		}
	case r.Method == http.MethodHead && key != "":
		m := contextKey().FindStringSubmatch(key)
		if m == nil || m[1] != org {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		st, err := os.Stat(s.objects.path(org, m[2]))
		if err != nil {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Length", strconv.FormatInt(st.Size(), 10))
		w.WriteHeader(http.StatusOK)
	default:
		writeS3Error(w, http.StatusNotImplemented, "NotImplemented",
			"agentbox serves ListObjectsV2, PutObject and multipart uploads of build contexts only")
	}
}

// s3Write is PutObject and the multipart upload the SDK takes for a
// context over its part size: CreateMultipartUpload, UploadPart,
// CompleteMultipartUpload, AbortMultipartUpload. Parts are files of a
// directory next to the context, joined in order at the end.
func (s *Server) s3Write(w http.ResponseWriter, r *http.Request, org, key string) error {
	m := contextKey().FindStringSubmatch(key)
	if m == nil || m[1] != org {
		return sandbox.Errorf(sandbox.ClassForbidden, "key %q: uploads go to %s/<md5>/context.tar", key, org)
	}
	q := r.URL.Query()
	_, create := q["uploads"]
	id := q.Get("uploadId")
	switch {
	case r.Method == http.MethodPut && id == "":
		return s.s3Put(w, r, org, key)
	case r.Method == http.MethodPost && create:
		return s.mpCreate(w, org, m[2], key)
	}
	if !uploadID().MatchString(id) {
		return sandbox.Errorf(sandbox.ClassNotFound, "no such upload")
	}
	dir := filepath.Join(filepath.Dir(s.objects.path(org, m[2])), ".mp-"+id)
	if _, err := os.Stat(dir); err != nil {
		return sandbox.Errorf(sandbox.ClassNotFound, "no such upload")
	}
	switch r.Method {
	case http.MethodPut:
		n, err := strconv.Atoi(q.Get("partNumber"))
		if err != nil || n < 1 || n > maxParts {
			return sandbox.Invalid("partNumber", "partNumber must be 1-%d", maxParts)
		}
		return s.writeObject(w, r, filepath.Join(dir, fmt.Sprintf("%05d", n)), fmt.Sprintf("part-%d", n))
	case http.MethodPost:
		return s.mpComplete(w, r, dir, org, m[2], key)
	default: // DELETE: abort
		os.RemoveAll(dir)
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
}

const maxParts = 10000

// isS3Complete matches a CompleteMultipartUpload (an XML body).
func isS3Complete(r *http.Request) bool {
	return r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, Prefix+s3Path+"/") && r.URL.Query().Get("uploadId") != ""
}

var uploadID = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9a-f]{32}$`) })

type mpInitiated struct {
	XMLName  xml.Name `xml:"InitiateMultipartUploadResult"`
	Bucket   string   `xml:"Bucket"`
	Key      string   `xml:"Key"`
	UploadID string   `xml:"UploadId"`
}

type mpCompleted struct {
	XMLName xml.Name `xml:"CompleteMultipartUploadResult"`
	Bucket  string   `xml:"Bucket"`
	Key     string   `xml:"Key"`
	ETag    string   `xml:"ETag"`
}

func (s *Server) mpCreate(w http.ResponseWriter, org, hash, key string) error {
	base := filepath.Dir(s.objects.path(org, hash))
	if old, _ := filepath.Glob(filepath.Join(base, ".mp-*")); len(old) >= 4 {
		return sandbox.Errorf(sandbox.ClassQuota, "too many uploads of this context in progress")
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	if err := os.MkdirAll(filepath.Join(base, ".mp-"+id), 0o700); err != nil {
		return fmt.Errorf("upload dir: %w", err)
	}
	writeXML(w, mpInitiated{Bucket: s3Bucket, Key: key, UploadID: id})
	return nil
}

// mpComplete joins the parts the request lists, in order, into the
// context.
func (s *Server) mpComplete(w http.ResponseWriter, r *http.Request, dir, org, hash, key string) error {
	var in struct {
		Parts []struct {
			PartNumber int `xml:"PartNumber"`
		} `xml:"Part"`
	}
	if err := xml.NewDecoder(http.MaxBytesReader(w, r.Body, 4<<20)).Decode(&in); err != nil {
		return sandbox.Invalid("body", "CompleteMultipartUpload: %v", err)
	}
	if len(in.Parts) == 0 || len(in.Parts) > maxParts {
		return sandbox.Invalid("body", "CompleteMultipartUpload: 1-%d parts", maxParts)
	}
	dst := s.objects.path(org, hash)
	f, err := os.CreateTemp(filepath.Dir(dst), ".upload-")
	if err != nil {
		return fmt.Errorf("context file: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	var total int64
	prev := 0
	for _, p := range in.Parts {
		if p.PartNumber <= prev || p.PartNumber > maxParts {
			return sandbox.Invalid("body", "CompleteMultipartUpload: parts out of order")
		}
		prev = p.PartNumber
		part, err := os.Open(filepath.Join(dir, fmt.Sprintf("%05d", p.PartNumber)))
		if err != nil {
			return sandbox.Invalid("body", "part %d was not uploaded", p.PartNumber)
		}
		n, err := io.Copy(f, part)
		part.Close()
		if err != nil {
			return fmt.Errorf("context file: %w", err)
		}
		if total += n; total > s.objects.maxBytes {
			return sandbox.Errorf(sandbox.ClassTooLarge, "a build context is at most %d bytes", s.objects.maxBytes)
		}
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("context file: %w", err)
	}
	if err := os.Rename(f.Name(), dst); err != nil {
		return fmt.Errorf("context file: %w", err)
	}
	os.RemoveAll(dir)
	writeXML(w, mpCompleted{Bucket: s3Bucket, Key: key, ETag: `"` + hash + `"`})
	return nil
}

func writeXML(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, xml.Header)
	_ = xml.NewEncoder(w).Encode(v)
}

// s3List lists the one context a prefix <org>/<md5>/ can hold.
func (s *Server) s3List(w http.ResponseWriter, org, prefix string) {
	out := s3ListResult{Xmlns: "http://s3.amazonaws.com/doc/2006-03-01/", Name: s3Bucket, Prefix: prefix, MaxKeys: 1000}
	if m := contextKey().FindStringSubmatch(prefix + "context.tar"); m != nil && m[1] == org {
		if st, err := os.Stat(s.objects.path(org, m[2])); err == nil {
			out.Contents = append(out.Contents, s3Object{Key: prefix + "context.tar", Size: st.Size(),
				LastModified: st.ModTime().UTC().Format(time.RFC3339)})
		}
	}
	out.KeyCount = len(out.Contents)
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, xml.Header)
	_ = xml.NewEncoder(w).Encode(out)
}

func (s *Server) s3Put(w http.ResponseWriter, r *http.Request, org, key string) error {
	m := contextKey().FindStringSubmatch(key)
	return s.writeObject(w, r, s.objects.path(org, m[2]), m[2])
}

// writeObject stores the request's body at dst (through a temporary file
// of its directory).
func (s *Server) writeObject(w http.ResponseWriter, r *http.Request, dst, etag string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return fmt.Errorf("context dir: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(dst), ".upload-")
	if err != nil {
		return fmt.Errorf("context file: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	body := http.MaxBytesReader(w, r.Body, s.objects.maxBytes+1<<20)
	defer func() { _, _ = io.Copy(io.Discard, body) }()
	var rd io.Reader = body
	// The AWS SDK may send a streamed body in aws-chunked encoding
	// (checksum trailers): unwrap it.
	if strings.Contains(r.Header.Get("Content-Encoding"), "aws-chunked") || strings.HasPrefix(r.Header.Get("X-Amz-Content-Sha256"), "STREAMING-") {
		rd = &awsChunked{r: bufio.NewReader(body)}
	}
	n, err := io.Copy(f, io.LimitReader(rd, s.objects.maxBytes+1))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return sandbox.Errorf(sandbox.ClassTooLarge, "a build context is at most %d bytes", s.objects.maxBytes)
		}
		if se := (*sandbox.Error)(nil); errors.As(err, &se) {
			return err
		}
		return sandbox.Wrap(sandbox.ClassInvalid, err, "reading the upload")
	}
	if n > s.objects.maxBytes {
		return sandbox.Errorf(sandbox.ClassTooLarge, "a build context is at most %d bytes", s.objects.maxBytes)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("context file: %w", err)
	}
	if err := os.Rename(f.Name(), dst); err != nil {
		return fmt.Errorf("context file: %w", err)
	}
	w.Header().Set("ETag", `"`+etag+`"`)
	w.WriteHeader(http.StatusOK)
	return nil
}

// awsChunked decodes aws-chunked content: "<hex size>[;ext]\r\n<data>\r\n"
// chunks, then a zero chunk and trailers.
type awsChunked struct {
	r    *bufio.Reader
	left int64
	done bool
}

func (c *awsChunked) Read(p []byte) (int, error) {
	for c.left == 0 {
		if c.done {
			return 0, io.EOF
		}
		line, err := c.r.ReadString('\n')
		if err != nil {
			return 0, sandbox.Errorf(sandbox.ClassInvalid, "aws-chunked body: %v", err)
		}
		line = strings.TrimSpace(line)
		if line == "" { // the CRLF after a chunk's data
			continue
		}
		size, _, _ := strings.Cut(line, ";")
		n, err := strconv.ParseInt(size, 16, 64)
		if err != nil || n < 0 {
			return 0, sandbox.Errorf(sandbox.ClassInvalid, "aws-chunked body: bad chunk size %q", size)
		}
		if n == 0 {
			c.done = true // trailers follow; they are not needed
			return 0, io.EOF
		}
		c.left = n
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	if err == io.EOF && c.left > 0 {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}
