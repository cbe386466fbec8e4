package admission

import (
	"errors"
	"testing"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// Heavy requests are admitted up to the per-user count, one user's half
// of the memory budget and the whole budget; refusals are 429-class with
// a retry hint, and releasing gives everything back.
func TestSecurityAdmission(t *testing.T) {
	const mib = 1 << 20
	m := New(3, 100*mib)
	refusedWithRetry := func(err error) bool {
		var ra *RetryAfterError
		return sandbox.ClassOf(err) == sandbox.ClassQuota && errors.As(err, &ra) && ra.Seconds() != ""
	}

	var releases []func()
	for range 3 {
		r, err := m.Admit("alice", 0)
		if err != nil {
			t.Fatalf("alice within her count: %v", err)
		}
		releases = append(releases, r)
	}
	if _, err := m.Admit("alice", 0); !refusedWithRetry(err) {
		t.Fatalf("alice over her count: %v", err)
	}
	// Reservations add to the share, not the count.
	r, err := m.Reserve("alice", 40*mib)
	if err != nil {
		t.Fatalf("alice's output reservation: %v", err)
	}
	releases = append(releases, r)
	if _, err := m.Reserve("alice", 10*mib); !refusedWithRetry(err) {
		t.Fatalf("alice over half the budget: %v", err)
	}
	// Bob has his own count and half.
	bob, err := m.Admit("bob", 40*mib)
	if err != nil {
		t.Fatalf("bob: %v", err)
	}
	if _, err := m.Admit("carol", 20*mib); !refusedWithRetry(err) {
		t.Fatalf("carol over the whole budget: %v", err)
	}
	if _, err := m.Admit("carol", 60*mib); sandbox.ClassOf(err) != sandbox.ClassTooLarge {
		t.Fatalf("a request larger than one user's half: %v", err)
	}
	bob()
	bob() // a second release is harmless
	if r, err := m.Admit("carol", 20*mib); err != nil {
		t.Fatalf("carol after bob finished: %v", err)
	} else {
		r()
	}
	for _, r := range releases {
		r()
	}
	if m.used != 0 || len(m.users) != 0 {
		t.Fatalf("after every release: %d bytes, %d users still counted", m.used, len(m.users))
	}

	unlimited := New(0, 0)
	for range 100 {
		if _, err := unlimited.Admit("u", 1<<40); err != nil {
			t.Fatalf("no limits configured: %v", err)
		}
	}
}
