package volume

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/minio/minio-go/v7"
	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/s3client"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// KindS3 is the kind of volumes in an S3-compatible bucket.
const KindS3 = "s3"

// S3 volumes are the objects under <prefix><volume id>/ of one bucket:
// a file is an object named by its path, a directory is its prefix (and
// an empty "<path>/" marker object, so an empty directory exists). Every
// replica reaches the same bucket, so a volume is usable from sandboxes on
// any of them.
//
// On each replica the daemon serves a volume as a FUSE filesystem
// (s3fs.go) mounted under Dir/<id>/mnt and bind-mounted, idmapped, into
// the sandboxes, as a local volume's directory is. Its consistency is
// close-to-open: an open fetches the object afresh (and the kernel's page
// cache of it is dropped), a close (or fsync) of a written file uploads
// it whole, and every lookup and stat asks the bucket (no attribute
// cache), so a file closed in one sandbox is read whole by any open that
// follows, on any replica.
type S3 struct {
	// Dir holds the volumes' mount points and the spool of open files.
	Dir    string
	Bucket string
	Prefix string
	Client *minio.Client
	// OpTimeout bounds one request to the bucket (0: 30s), so a bucket
	// that is down fails a file operation with EIO rather than hanging it.
	OpTimeout time.Duration
	Log       *slog.Logger

	mu     sync.Mutex
	mounts map[string]*s3Mount // volume id -> its FUSE mount here
}

var _ Driver = (*S3)(nil)

type s3Mount struct {
	srv  *fuse.Server
	fsys *s3FS
}

// NewS3 returns the driver of the bucket st names, or nil when
// S3_VOLUMES_ENDPOINT is empty.
func NewS3(st S3Settings, dir string, log *slog.Logger) (*S3, error) {
	if st.S3VolumesEndpoint == "" {
		return nil, nil
	}
	if st.S3VolumesBucket == "" {
		return nil, errors.New("S3_VOLUMES_BUCKET is required with S3_VOLUMES_ENDPOINT")
	}
	c, err := s3client.New(s3client.Options{Setting: "S3_VOLUMES_ENDPOINT", Endpoint: st.S3VolumesEndpoint,
		AccessKey: st.S3VolumesAccessKey, SecretKey: st.S3VolumesSecretKey, Region: st.S3VolumesRegion, PathStyle: st.S3VolumesPathStyle,
		// Few retries: a file operation waits on them, and the bound
		// below must hold.
		MaxRetries: 2})
	if err != nil {
		return nil, fmt.Errorf("s3 volumes client: %w", err)
	}
	prefix := strings.TrimPrefix(st.S3VolumesPrefix, "/")
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	if log == nil {
		log = slog.Default()
	}
	return &S3{Dir: dir, Bucket: st.S3VolumesBucket, Prefix: prefix, Client: c, Log: log}, nil
}

func (d *S3) timeout() time.Duration {
	if d.OpTimeout > 0 {
		return d.OpTimeout
	}
	return 30 * time.Second
}

func (d *S3) prefix(v Volume) string { return d.Prefix + v.ID + "/" }
func (d *S3) mnt(v Volume) string    { return filepath.Join(d.Dir, v.ID, "mnt") }
func (d *S3) spool() string          { return filepath.Join(d.Dir, "spool") }

// s3Err gives the bucket's errors a class.
func s3Err(what string, err error) error {
	return &sandbox.Error{Class: sandbox.ClassUnavailable, Msg: fmt.Sprintf("the volumes' object storage cannot be reached (%s): %v", what, err), Err: err}
}

// Create implements Driver: the root's marker object, which also proves
// the bucket is reachable with the keys given.
func (d *S3) Create(ctx context.Context, v Volume) error {
	ctx, cancel := context.WithTimeout(ctx, d.timeout())
	defer cancel()
	if _, err := d.Client.PutObject(ctx, d.Bucket, d.prefix(v), strings.NewReader(""), 0, minio.PutObjectOptions{}); err != nil {
		return s3Err("create volume", err)
	}
	return nil
}

// Path implements Driver: the volume's FUSE mount on this replica, made
// when there is none (a mount left by an earlier daemon process has no
// server any more: it is detached first).
func (d *S3) Path(ctx context.Context, v Volume) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	mnt := d.mnt(v)
	if m := d.mounts[v.ID]; m != nil {
		return mnt, nil
	}
	if mounted, err := mountinfo.Mounted(mnt); err == nil && mounted {
		_ = unix.Unmount(mnt, unix.MNT_DETACH)
	}
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		return "", err
	}
	if err := os.MkdirAll(d.spool(), 0o700); err != nil {
		return "", err
	}
	fsys := &s3FS{d: d, v: v, prefix: d.prefix(v)}
	if err := fsys.recount(ctx); err != nil {
		return "", err
	}
	zero := time.Duration(0)
	srv, err := fs.Mount(mnt, &s3Node{fsys: fsys, dir: true}, &fs.Options{
		// No caches: every lookup and stat asks the bucket, which is
		// what makes another sandbox's close visible to the next open.
		EntryTimeout:    &zero,
		AttrTimeout:     &zero,
		NegativeTimeout: &zero,
		MountOptions: fuse.MountOptions{
			AllowOther: true, // the sandboxes' users are not the daemon's
			FsName:     "agentbox-s3",
			Name:       "agentbox",
			// The kernel checks permissions (and an idmapped bind
			// of the mount into a sandbox needs it).
			IDMappedMount:     true,
			DirectMountStrict: true,
			DirectMountFlags:  unix.MS_NOSUID | unix.MS_NODEV,
			MaxBackground:     32,
			DisableXAttrs:     true,
		},
		UID: sandboxUser,
		GID: sandboxUser,
	})
	if err != nil {
		return "", fmt.Errorf("mount s3 volume %q: %w", v.Name, err)
	}
	if d.mounts == nil {
		d.mounts = map[string]*s3Mount{}
	}
	d.mounts[v.ID] = &s3Mount{srv: srv, fsys: fsys}
	return mnt, nil
}

// Usage implements Driver: the sum of the volume's objects.
func (d *S3) Usage(ctx context.Context, v Volume) (Usage, error) {
	used, err := d.used(ctx, v)
	if err != nil {
		return Usage{}, err
	}
	d.mu.Lock()
	if m := d.mounts[v.ID]; m != nil {
		m.fsys.used.Store(used)
	}
	d.mu.Unlock()
	return Usage{UsedBytes: used, TotalBytes: v.SizeBytes}, nil
}

func (d *S3) used(ctx context.Context, v Volume) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 4*d.timeout())
	defer cancel()
	var n int64
	for o := range d.Client.ListObjects(ctx, d.Bucket, minio.ListObjectsOptions{Prefix: d.prefix(v), Recursive: true}) {
		if o.Err != nil {
			return 0, s3Err("list volume", o.Err)
		}
		n += o.Size
	}
	return n, nil
}

// Remove implements Driver: every object of the volume, then this
// replica's mount (sandboxes holding it get errors from then on; another
// replica's mount finds no objects any more).
func (d *S3) Remove(ctx context.Context, v Volume) error {
	d.unmount(v.ID)
	_ = os.RemoveAll(filepath.Join(d.Dir, v.ID))
	ctx, cancel := context.WithTimeout(ctx, 10*d.timeout())
	defer cancel()
	objs := make(chan minio.ObjectInfo)
	var listErr error
	go func() {
		defer close(objs)
		for o := range d.Client.ListObjects(ctx, d.Bucket, minio.ListObjectsOptions{Prefix: d.prefix(v), Recursive: true}) {
			if o.Err != nil {
				listErr = o.Err
				return
			}
			objs <- o
		}
	}()
	var first error
	for e := range d.Client.RemoveObjects(ctx, d.Bucket, objs, minio.RemoveObjectsOptions{}) {
		if first == nil {
			first = e.Err
		}
	}
	if listErr != nil {
		return s3Err("list volume", listErr)
	}
	if first != nil {
		return s3Err("remove volume", first)
	}
	return nil
}

func (d *S3) unmount(id string) {
	d.mu.Lock()
	m := d.mounts[id]
	delete(d.mounts, id)
	d.mu.Unlock()
	if m == nil {
		return
	}
	if err := m.srv.Unmount(); err != nil {
		// Still held by a sandbox: detached lazily, its server stops
		// when the last user lets go.
		_ = unix.Unmount(filepath.Join(d.Dir, id, "mnt"), unix.MNT_DETACH)
	}
}

// UnmountAll unmounts every s3 volume of this replica (the daemon is
// shutting down: its FUSE servers end with it).
func (d *S3) UnmountAll() error {
	d.mu.Lock()
	ids := make([]string, 0, len(d.mounts))
	for id := range d.mounts {
		ids = append(ids, id)
	}
	d.mu.Unlock()
	for _, id := range ids {
		d.unmount(id)
	}
	return nil
}
