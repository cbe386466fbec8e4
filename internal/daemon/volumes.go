package daemon

import (
	"os"
	"path/filepath"

	"github.com/agentbox/agentbox/internal/volume"
)

// openVolumes makes the volume service over the state store (every
// replica sharing it sees the same volume records), with local volumes
// under DATA_DIR/volumes; nil when volumes are off or cannot be served
// (not root: no loop devices; a store without documents).
func (s *server) openVolumes() *volume.Service {
	cfg := s.cfg
	docs := docsOf(s.store)
	if !cfg.VolumesEnabled || docs == nil {
		return nil
	}
	if os.Geteuid() != 0 {
		s.log.Info("volumes are off: local volumes need root (loop devices)")
		return nil
	}
	dir := filepath.Join(s.dataDir, "volumes")
	local := &volume.Local{Dir: filepath.Join(dir, "local"), Reserve: int64(cfg.DiskReserve)}
	drivers := map[string]volume.Driver{volume.KindLocal: local}
	// Object storage: the daemon serves each s3 volume a sandbox mounts
	// here as a FUSE filesystem (internal/volume/s3fs.go).
	s3, err := volume.NewS3(cfg.S3Settings, filepath.Join(dir, "s3"), s.log)
	if err != nil {
		s.log.Error("s3 volumes are off", "err", err)
	} else if s3 != nil {
		drivers[volume.KindS3] = s3
	}
	// Pushed before the manager: closed after it.
	s.push("volumes", func() error {
		if s3 != nil {
			// The FUSE servers end with this process: their mounts go
			// (a sandbox that outlives it gets ENOTCONN).
			_ = s3.UnmountAll()
		}
		if s.shutDown && cfg.AutoCleanup {
			// Every sandbox is gone: nothing holds the volumes' mounts.
			return local.UnmountAll()
		}
		return nil
	})
	return volume.New(volume.Config{
		Docs:        docs,
		Drivers:     drivers,
		Node:        s.node,
		DefaultSize: cfg.VolumeDefaultSize,
		MaxSize:     int64(cfg.VolumeMaxSize),
		MaxPerUser:  cfg.VolumeMaxPerUser,
		BindDir:     filepath.Join(dir, "binds"),
	})
}
