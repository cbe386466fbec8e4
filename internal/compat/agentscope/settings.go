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
	StorageFolder    string     `env:"STORAGE_FOLDER" envDefault:"" help:"where released workspaces are copied (with FILE_SYSTEM=local)"`
	FileSystem       FileSystem `env:"FILE_SYSTEM" envDefault:"local" help:"storage for STORAGE_FOLDER: local"`
	RuntimeRegistry  ImagePart  `env:"RUNTIME_SANDBOX_REGISTRY" envDefault:"" help:"registry of agentscope's sandbox images, for sandbox types not in SANDBOX_TEMPLATES (empty: Docker Hub)"`
	RuntimeNamespace ImagePart  `env:"RUNTIME_SANDBOX_IMAGE_NAMESPACE" envDefault:"agentscope" help:"namespace of agentscope's sandbox images: type T is [registry/][namespace/]runtime-sandbox-T:tag"`
	RuntimeTag       ImageTag   `env:"RUNTIME_SANDBOX_IMAGE_TAG" envDefault:"latest" help:"tag of agentscope's sandbox images"`
}

// IgnoredSettings are names agentscope deployments set that mean nothing
// here: accepted (so an existing .env file loads) and reported as
// ignored.
var IgnoredSettings = []string{"PORT_RANGE", "REDIS_PORT_KEY",
	"OSS_ENDPOINT", "OSS_ACCESS_KEY_ID", "OSS_ACCESS_KEY_SECRET", "OSS_BUCKET_NAME"}

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

// FileSystem is FILE_SYSTEM, the storage of STORAGE_FOLDER: local.
type FileSystem string

// UnmarshalText accepts local (or nothing).
func (f *FileSystem) UnmarshalText(b []byte) error {
	if v := string(b); v != "local" && v != "" {
		return fmt.Errorf("only \"local\" is supported")
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
