package agentscope

import (
	"fmt"
	"strings"
)

// Settings are agentscope's settings (internal/settings): sandbox names,
// workspace copies, and the names of agentscope's sandbox images for the
// sandbox types without a template of their own. The daemon gives them to
// Config.
type Settings struct {
	ContainerPrefix  string     `env:"CONTAINER_PREFIX_KEY" envDefault:"" help:"prefix of sandbox names in the agentscope API"`
	StorageFolder    string     `env:"STORAGE_FOLDER" envDefault:"" help:"where released workspaces are copied (FILE_SYSTEM=local), or staged on their way to and from the bucket (FILE_SYSTEM=oss)"`
	FileSystem       FileSystem `env:"FILE_SYSTEM" envDefault:"local" help:"storage of the released workspaces: local (STORAGE_FOLDER on this host) or oss (a bucket of an S3-compatible object store: OSS_*, shared by every replica)"`
	OSSEndpoint      string     `env:"OSS_ENDPOINT" envDefault:"" help:"with FILE_SYSTEM=oss: the object store's endpoint, host[:port] (https) or http(s)://host[:port] (Alibaba OSS's S3 endpoint, AWS S3, MinIO, Ceph, SeaweedFS)"`
	OSSAccessKeyID   string     `env:"OSS_ACCESS_KEY_ID" envDefault:"" help:"with FILE_SYSTEM=oss: the access key (the daemon's only, never given to sandboxes)"`
	OSSAccessSecret  string     `env:"OSS_ACCESS_KEY_SECRET" envDefault:"" help:"with FILE_SYSTEM=oss: the secret key"`
	OSSBucketName    string     `env:"OSS_BUCKET_NAME" envDefault:"" help:"with FILE_SYSTEM=oss: the bucket of the workspace copies (it must exist)"`
	OSSRegion        string     `env:"OSS_REGION" envDefault:"" help:"with FILE_SYSTEM=oss: the bucket's region, when the store needs one"`
	OSSPathStyle     bool       `env:"OSS_PATH_STYLE" envDefault:"false" help:"with FILE_SYSTEM=oss: address the bucket in the path (MinIO, SeaweedFS, Ceph) rather than as a host name"`
	OSSPrefix        string     `env:"OSS_PREFIX" envDefault:"agentbox-workspaces/" help:"with FILE_SYSTEM=oss: the key prefix of the workspace copies in the bucket"`
	RuntimeRegistry  ImagePart  `env:"RUNTIME_SANDBOX_REGISTRY" envDefault:"" help:"registry of agentscope's sandbox images, for sandbox types not in SANDBOX_TEMPLATES (empty: Docker Hub)"`
	RuntimeNamespace ImagePart  `env:"RUNTIME_SANDBOX_IMAGE_NAMESPACE" envDefault:"agentscope" help:"namespace of agentscope's sandbox images: type T is [registry/][namespace/]runtime-sandbox-T:tag"`
	RuntimeTag       ImageTag   `env:"RUNTIME_SANDBOX_IMAGE_TAG" envDefault:"latest" help:"tag of agentscope's sandbox images"`
}

// IgnoredSettings are names agentscope deployments set that mean nothing
// here: accepted (so an existing .env file loads) and reported as
// ignored.
var IgnoredSettings = []string{"PORT_RANGE", "REDIS_PORT_KEY"}

// RuntimeImage is agentscope's image name of sandbox type t,
// [registry/][namespace/]runtime-sandbox-<t>:<tag>.
func (s Settings) RuntimeImage(t string) string {
	name := "runtime-sandbox-" + t + ":" + string(s.RuntimeTag)
	if s.RuntimeNamespace != "" {
		name = string(s.RuntimeNamespace) + "/" + name
	}
	if s.RuntimeRegistry != "" {
		name = string(s.RuntimeRegistry) + "/" + name
	}
	return name
}

// FileSystem is FILE_SYSTEM, the storage of the workspace copies: local
// or oss.
type FileSystem string

// UnmarshalText accepts local, oss (or nothing).
func (f *FileSystem) UnmarshalText(b []byte) error {
	if v := string(b); v != "local" && v != "oss" && v != "" {
		return fmt.Errorf("want local or oss")
	}
	*f = FileSystem(b)
	return nil
}

// ImagePart is a registry host or an image namespace ("" or a path such
// as team/sandboxes), without leading or trailing slashes.
type ImagePart string

// UnmarshalText checks the part.
func (p *ImagePart) UnmarshalText(b []byte) error {
	v := strings.Trim(string(b), "/")
	if strings.ContainsAny(v, " \t@\\") || strings.Contains(v, "//") || strings.Contains(v, "..") {
		return fmt.Errorf("want a registry host or image namespace such as registry.example.com or agentscope")
	}
	*p = ImagePart(v)
	return nil
}

// ImageTag is an image tag such as latest.
type ImageTag string

// UnmarshalText checks the tag.
func (t *ImageTag) UnmarshalText(b []byte) error {
	if v := string(b); v == "" || strings.ContainsAny(v, "/:@ ") {
		return fmt.Errorf("want an image tag such as latest")
	}
	*t = ImageTag(b)
	return nil
}
