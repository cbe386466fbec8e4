package template

import (
	"strings"
	"testing"
)

func TestSecurityPrivateNames(t *testing.T) {
	a := PrivateName("alice", "snap:v1")
	if !IsPrivate(a) || !strings.HasSuffix(a, "/snap:v1") {
		t.Fatalf("PrivateName = %q", a)
	}
	if _, err := parseRef(a); err != nil {
		t.Errorf("private name %q is not a valid template name: %v", a, err)
	}
	if PrivateName("alice", a) != a {
		t.Errorf("PrivateName is not idempotent: %q", PrivateName("alice", a))
	}
	if !VisibleTo(a, "alice") || VisibleTo(a, "bob") || VisibleTo(a, "") {
		t.Errorf("alice's snapshot visible to the wrong users")
	}
	if !VisibleTo("base", "bob") || !VisibleTo("python:3.12", "") {
		t.Errorf("shared templates must be visible to everyone")
	}
	if VisibleTo("build-cache/0123456789abcdef0123456789abcdef", "bob") {
		t.Errorf("the build cache is visible to a tenant")
	}
	if PrivateName("bob", "snap:v1") == a {
		t.Errorf("two owners share a namespace")
	}
}
