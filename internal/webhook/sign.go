package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"
)

// The headers of a delivery.
const (
	HeaderWebhookID  = "Agentbox-Webhook-Id"
	HeaderDeliveryID = "Agentbox-Delivery-Id"
	HeaderTimestamp  = "Agentbox-Timestamp"
	HeaderSignature  = "Agentbox-Signature"
)

// DefaultTolerance is the replay window receivers should use: a delivery
// whose timestamp is further from their clock is refused.
const DefaultTolerance = 5 * time.Minute

// Sign returns the signature header value of body sent at ts:
// "v1=" + hex(HMAC-SHA256(secret, "<unix seconds>.<body>")).
func Sign(secret string, ts time.Time, body []byte) string {
	return "v1=" + hex.EncodeToString(mac(secret, strconv.FormatInt(ts.Unix(), 10), body))
}

func mac(secret, ts string, body []byte) []byte {
	h := hmac.New(sha256.New, []byte(secret))
	h.Write([]byte(ts))
	h.Write([]byte{'.'})
	h.Write(body)
	return h.Sum(nil)
}

// SignE2B is E2B's webhook signature: the unpadded base64 of
// SHA-256(secret followed by the raw body).
func SignE2B(secret string, body []byte) string {
	h := sha256.New()
	h.Write([]byte(secret))
	h.Write(body)
	return base64.RawStdEncoding.EncodeToString(h.Sum(nil))
}

// The ways Verify refuses a delivery.
var (
	ErrNoSignature  = errors.New("webhook: no signature or timestamp")
	ErrBadSignature = errors.New("webhook: signature does not match")
	ErrStale        = errors.New("webhook: timestamp outside the replay window")
)

// Verify checks a delivery as its receiver should: the signature over the
// timestamp header and the raw body, with the timestamp within tolerance
// of now (a replayed delivery is refused once it is older than that; a
// receiver that must refuse any replay also remembers the delivery ids it
// has seen within the window). Several "v1=" values (comma-separated) are
// accepted, so a secret can be rotated.
func Verify(secret, timestamp, signature string, body []byte, now time.Time, tolerance time.Duration) error {
	if timestamp == "" || signature == "" {
		return ErrNoSignature
	}
	sec, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil {
		return ErrNoSignature
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return ErrStale
	}
	want := mac(secret, timestamp, body)
	for _, part := range strings.Split(signature, ",") {
		v, ok := strings.CutPrefix(strings.TrimSpace(part), "v1=")
		if !ok {
			continue
		}
		got, err := hex.DecodeString(v)
		if err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return ErrBadSignature
}
