//go:build !(linux && cgo)

package fastinit

// Without cgo there is no C constructor: sandbox inits run from the daemon
// binary (which cannot start sandboxes without cgo anyway: runc's nsenter
// is C).
