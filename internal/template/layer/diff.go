package layer

import (
	"context"
	"errors"
	"io"
)

func diff(ctx context.Context, upper string, w io.Writer, opts DiffOptions) error {
	return errors.New("layer.Diff: not implemented")
}
