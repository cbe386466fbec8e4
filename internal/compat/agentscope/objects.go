package agentscope

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/minio/minio-go/v7"
)

// Objects keeps the workspace copies in a bucket (FILE_SYSTEM=oss), so a
// workspace released on one replica is restored on any other. Each copy is
// one tar object, at Prefix + the owner's storage name + the copy's path
// under the owner's storage area: the same owner binding as local copies
// (another owner's storage_path names another key, never this one). The
// copy passes through STORAGE_FOLDER on its way (written and read with the
// same os.Root confinement as a local copy) and is not kept there once it
// is in the bucket.
type Objects struct {
	Client *minio.Client
	Bucket string
	Prefix string // "" or ending in "/"
}

func (o *Objects) key(owner, rel string) string {
	return o.Prefix + ownerStorageName(owner) + "/" + filepath.ToSlash(rel) + ".tar"
}

// upload stores area/rel as r's copy in the bucket.
func (o *Objects) upload(ctx context.Context, r *record, area *os.Root, rel string) error {
	src, err := area.OpenRoot(rel)
	if err != nil {
		return err
	}
	defer src.Close()
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeTar(pw, src)) }()
	_, err = o.Client.PutObject(ctx, o.Bucket, o.key(r.Owner, rel), pr, -1, minio.PutObjectOptions{ContentType: "application/x-tar"})
	pr.Close()
	if err != nil {
		return fmt.Errorf("store the workspace copy in bucket %s: %w", o.Bucket, err)
	}
	return nil
}

// download unpacks r's copy from the bucket into area/rel (replacing what
// is there); found is false when the bucket has none.
func (o *Objects) download(ctx context.Context, r *record, area *os.Root, rel string) (found bool, err error) {
	obj, err := o.Client.GetObject(ctx, o.Bucket, o.key(r.Owner, rel), minio.GetObjectOptions{})
	if err != nil {
		return false, fmt.Errorf("read the workspace copy from bucket %s: %w", o.Bucket, err)
	}
	defer obj.Close()
	if _, err := obj.Stat(); err != nil {
		if minio.ToErrorResponse(err).Code == "NoSuchKey" {
			return false, nil
		}
		return false, fmt.Errorf("read the workspace copy from bucket %s: %w", o.Bucket, err)
	}
	if err := area.RemoveAll(rel); err != nil {
		return false, err
	}
	if err := area.MkdirAll(rel, 0o700); err != nil {
		return false, err
	}
	dst, err := area.OpenRoot(rel)
	if err != nil {
		return false, err
	}
	defer dst.Close()
	if err := untar(obj, dst); err != nil {
		return false, fmt.Errorf("unpack the workspace copy from bucket %s: %w", o.Bucket, err)
	}
	return true, nil
}

// stageFromBucket puts r's copy at area/rel before a restore: a copy
// already there wins (it is newer: its upload failed), else the bucket's.
// done removes the staged copy once the restore is over.
func (o *Objects) stageFromBucket(ctx context.Context, r *record, area *os.Root, rel string) (done func(), err error) {
	if _, err := area.Stat(rel); err == nil {
		return func() {}, nil // kept by a failed upload; uploaded again at the next release
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	found, err := o.download(ctx, r, area, rel)
	if err != nil || !found {
		return func() {}, err
	}
	return func() { _ = area.RemoveAll(rel) }, nil
}
