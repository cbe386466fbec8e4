//go:build !(linux && cgo)

package usernsholder

import "errors"

// Start is only available on Linux with cgo; callers fall back to
// os.StartProcess.
func Start(exe string) (int, error) {
	return 0, errors.ErrUnsupported
}
