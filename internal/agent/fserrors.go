package agent

import (
	"errors"
	"fmt"
	"io/fs"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"
)

// fsError classifies a filesystem error as a connect error; what names the
// object for the message ("path \"/x\"").
func fsError(what string, err error) error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	code := connect.CodeInternal
	switch {
	case errors.Is(err, fs.ErrNotExist):
		code = connect.CodeNotFound
	case errors.Is(err, fs.ErrPermission), errors.Is(err, unix.EROFS):
		code = connect.CodePermissionDenied
	case errors.Is(err, fs.ErrExist):
		code = connect.CodeAlreadyExists
	case errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.EISDIR), errors.Is(err, unix.ENAMETOOLONG),
		errors.Is(err, unix.ELOOP), errors.Is(err, unix.EINVAL), errors.Is(err, unix.EXDEV),
		errors.Is(err, unix.ENOTEMPTY):
		code = connect.CodeInvalidArgument
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT):
		code = connect.CodeResourceExhausted
	}
	return connect.NewError(code, fmt.Errorf("%s: %w", what, err))
}
