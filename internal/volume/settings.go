package volume

import "github.com/agentbox/agentbox/internal/settings"

// Settings are the volumes' settings (internal/settings). The daemon
// gives them to Config and Local.
type Settings struct {
	VolumesEnabled    bool                `env:"VOLUMES_ENABLED" envDefault:"true" help:"serve volumes (/v1/volumes, volume mounts at create): named, tenant-owned stores of files that outlive sandboxes (docs/volumes.md); needs root (loop devices)"`
	VolumeDefaultSize int64               `env:"VOLUME_DEFAULT_SIZE" envDefault:"1G" help:"size of a volume created without one; a volume's size is reserved on the data disk and counts against STORAGE_QUOTA_PER_USER"`
	VolumeMaxSize     settings.SizeOrZero `env:"VOLUME_MAX_SIZE" envDefault:"100G" help:"largest volume a user may create, 0 = no limit besides the storage quota and the disk"`
	VolumeMaxPerUser  int                 `env:"VOLUME_MAX_PER_USER" envDefault:"50" min:"0" max:"1048576" help:"volumes one user may keep, 0 = unlimited"`
}
