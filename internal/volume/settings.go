package volume

import "github.com/agentbox/agentbox/internal/settings"

// Settings are the volumes' settings (internal/settings). The daemon
// gives them to Config and Local.
type Settings struct {
	VolumesEnabled    bool                `env:"VOLUMES_ENABLED" envDefault:"true" help:"serve volumes (/v1/volumes, volume mounts at create): named, tenant-owned stores of files that outlive sandboxes (docs/volumes.md); needs root (loop devices)"`
	VolumeDefaultSize int64               `env:"VOLUME_DEFAULT_SIZE" envDefault:"1G" help:"size of a volume created without one; a volume's size is reserved on the data disk and counts against STORAGE_QUOTA_PER_USER"`
	VolumeMaxSize     settings.SizeOrZero `env:"VOLUME_MAX_SIZE" envDefault:"100G" help:"largest volume a user may create, 0 = no limit besides the storage quota and the disk"`
	VolumeMaxPerUser  int                 `env:"VOLUME_MAX_PER_USER" envDefault:"50" min:"0" max:"1048576" help:"volumes one user may keep, 0 = unlimited"`
	S3Settings
}

// S3Settings are the object-storage volumes' settings: one S3-compatible
// bucket for every volume of kind "s3" (a volume is the objects under
// S3_VOLUMES_PREFIX<volume id>/). Only the daemon holds the keys: a
// sandbox sees a mounted directory and tenants see volume records, never
// the bucket or its credentials.
type S3Settings struct {
	S3VolumesEndpoint  string `env:"S3_VOLUMES_ENDPOINT" envDefault:"" help:"S3-compatible endpoint of volumes of kind \"s3\" (AWS S3, MinIO, Ceph RGW, Alibaba OSS's S3 endpoint, SeaweedFS), a URL such as https://s3.eu-west-1.amazonaws.com; empty: no s3 volumes (docs/volumes.md)"`
	S3VolumesBucket    string `env:"S3_VOLUMES_BUCKET" envDefault:"" help:"bucket holding the s3 volumes; it must exist"`
	S3VolumesAccessKey string `env:"S3_VOLUMES_ACCESS_KEY" envDefault:"" help:"access key id of the s3 volumes' bucket (never shown to tenants or sandboxes)"`
	S3VolumesSecretKey string `env:"S3_VOLUMES_SECRET_KEY" envDefault:"" help:"secret access key of the s3 volumes' bucket (never shown to tenants or sandboxes)"`
	S3VolumesRegion    string `env:"S3_VOLUMES_REGION" envDefault:"" help:"region of the s3 volumes' bucket; empty: asked of the endpoint"`
	S3VolumesPathStyle bool   `env:"S3_VOLUMES_PATH_STYLE" envDefault:"false" help:"address the bucket path-style (endpoint/bucket/key, as MinIO, Ceph and SeaweedFS want) rather than as a virtual host (bucket.endpoint/key)"`
	S3VolumesPrefix    string `env:"S3_VOLUMES_PREFIX" envDefault:"agentbox/volumes/" help:"key prefix of the s3 volumes in the bucket"`
}
