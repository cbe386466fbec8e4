package template

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// Templates a user makes from their own sandboxes (snapshots) hold that
// user's files: they live under a namespace of their own,
// private/<owner key>/NAME[:TAG], which only that user (and the server's
// template admins) can see, use or delete. A tenant can therefore neither
// read another tenant's snapshot nor replace a shared template (say,
// "base") that other tenants' sandboxes start from.
const privateRoot = "private/"

// PrivateName returns name ("NAME[:TAG]") in owner's private namespace.
// A name already in that namespace is returned as it is.
func PrivateName(owner, name string) string {
	prefix := privatePrefix(owner)
	if strings.HasPrefix(name, prefix) {
		return name
	}
	return prefix + name
}

// buildCacheRoot holds the intermediate templates of the operator's
// Dockerfile builds (the builder's step cache): the operator's alone.
const buildCacheRoot = "build-cache/"

// VisibleTo reports whether owner may see and use the template named name:
// every shared template, and the private ones of owner's own namespace.
// Template admins see everything (callers check that themselves).
func VisibleTo(name, owner string) bool {
	if strings.HasPrefix(name, buildCacheRoot) {
		return false
	}
	return !IsPrivate(name) || strings.HasPrefix(name, privatePrefix(owner))
}

// IsPrivate reports whether name is in some user's private namespace.
func IsPrivate(name string) bool { return strings.HasPrefix(name, privateRoot) }

// privatePrefix is owner's namespace: a hash, because user names need not
// be valid reference components (and should not be listed to others).
func privatePrefix(owner string) string {
	sum := sha256.Sum256([]byte(owner))
	return privateRoot + "u" + hex.EncodeToString(sum[:8]) + "/"
}
