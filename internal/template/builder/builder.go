// Package builder builds templates from Dockerfiles. It parses with
// BuildKit's Dockerfile parser and instruction package, expands variables
// with BuildKit's shell lexer (exactly as docker build does), and executes
// the steps through two small interfaces: a Runner runs RUN steps in a
// fresh sandbox and returns the step's layer, and a Store resolves, pulls
// and commits templates. COPY and ADD build their layer tar directly from
// the context, without a sandbox.
//
// Every layer step (RUN, COPY, ADD, WORKDIR) is committed as an
// intermediate template named build-cache/<key> (see CacheName), keyed
// like Docker's build cache: the parent's key plus the expanded
// instruction (plus a content hash of the files COPY/ADD select). A small
// index in the builder's cache directory maps a key to its template, so an
// unchanged rebuild runs no RUN step at all. Steps that only change the
// image config (ENV, LABEL, CMD, ...) are folded into the next commit.
package builder

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/template"
)

// Store is what the builder needs of the template store; *template.Store
// implements it.
type Store interface {
	// Resolve returns a stored template; an unknown name is
	// sandbox.ClassNotFound.
	Resolve(ctx context.Context, ref string) (sandbox.Template, error)
	// Pull fetches a registry image as template name.
	Pull(ctx context.Context, ref, name string, opts template.PullOptions, progress func(template.Progress)) (template.Info, error)
	// Commit stores base's layers plus the layer tar diff (nil: none) as
	// template name with image config cfg.
	Commit(ctx context.Context, name string, base sandbox.Template, diff io.Reader, cfg sandbox.ImageConfig, source string) (template.Info, error)
}

// Runner runs RUN steps.
type Runner interface {
	// Run runs step in a fresh sandbox whose writable root filesystem is
	// base (every layer of the stage so far), as step.User inside the
	// sandbox's user namespace, with egress network unless step.Network
	// is "none". Secrets are mounted (tmpfs, at their Target) or set in
	// the environment for this step only, cache mounts persist per
	// CacheMount.ID in the runner's cache directory; neither may appear
	// in the returned layer. The step's output goes to out. It returns
	// the layer tar of what the step changed (an overlayfs diff of its
	// upper directory, without the mount targets it created), which the
	// caller closes.
	//
	// A command that ran and failed is an *ExitError; a step the
	// Dockerfile got wrong (a bad mount, an unknown USER) is
	// sandbox.ClassInvalid. Any other error is the server's (a sandbox
	// that could not start: quota, disk, backend) and keeps its class,
	// internal when it has none: the build does not blame the Dockerfile.
	Run(ctx context.Context, base sandbox.Template, step RunStep, out io.Writer) (io.ReadCloser, error)
}

// ExitError is a RUN command that exited non-zero or was killed: the
// Dockerfile's fault.
type ExitError struct {
	Code   int
	Status string // how it ended, e.g. "exit status 2", "signal: killed"
}

func (e *ExitError) Error() string {
	return fmt.Sprintf("returned a non-zero code: %d (%s)", e.Code, e.Status)
}

// RunStep is one RUN instruction, fully expanded.
type RunStep struct {
	// Args is the command line (the shell prepended for the shell form).
	Args       []string `json:"args"`
	Env        []string `json:"env"` // KEY=VALUE: the image env plus the build args in scope
	WorkingDir string   `json:"working_dir"`
	User       string   `json:"user"`    // "" = root
	Network    string   `json:"network"` // "default" or "none"
	Secrets    []SecretMount
	Caches     []CacheMount
	Binds      []BindMount
	Tmpfs      []TmpfsMount
	// Started is called with the sandbox's id once it runs (" ---> Running
	// in <id>"); may be nil.
	Started func(id string) `json:"-"`
}

// SecretMount is RUN --mount=type=secret. The value never reaches a
// layer, the cache key or the build output.
type SecretMount struct {
	ID     string
	Target string // file path in the sandbox ("" when only Env is set)
	Env    string // environment variable name ("" when only a file)
	Data   []byte `json:"-"`
	Mode   uint32 // file mode (default 0400)
	UID    uint32
	GID    uint32
}

// CacheMount is RUN --mount=type=cache: a directory kept across builds
// per ID in the runner's cache directory.
type CacheMount struct {
	ID       string
	Target   string
	ReadOnly bool
	Sharing  string // shared, private, locked
	Mode     uint32
	UID, GID uint32
}

// BindMount is RUN --mount=type=bind,from=STAGE|IMAGE: a read-only (or
// throw-away writable) view of another root filesystem.
type BindMount struct {
	From      sandbox.Template // the stage's or image's root filesystem
	Source    string           // path inside From
	Target    string
	ReadWrite bool // writes are discarded after the step
}

// TmpfsMount is RUN --mount=type=tmpfs.
type TmpfsMount struct {
	Target string
	Size   int64
}

// Options describe one build.
type Options struct {
	// Dockerfile is the Dockerfile's content; DockerfileName names it in
	// messages ("Dockerfile" when empty).
	Dockerfile     []byte
	DockerfileName string
	// ContextDir is the build context, a directory. A context sent as a
	// tar stream (the API) is unpacked first with layer.Unpack.
	ContextDir string
	// Tags name the result (NAME[:TAG]); none leaves only the digest.
	Tags      []string
	BuildArgs map[string]string
	// Secrets are the values of RUN --mount=type=secret by id.
	Secrets map[string][]byte
	// Target builds this stage instead of the last one.
	Target  string
	NoCache bool
	// Pull options for FROM images not in the store.
	Pull template.PullOptions
	// Output receives docker-build-like text; Events the same as values.
	// Both may be nil.
	Output io.Writer
	Events func(Event)
}

// Result is a finished build.
type Result struct {
	Digest string        `json:"digest"`
	Tags   []string      `json:"tags,omitempty"`
	Info   template.Info `json:"info"`
	// Steps and Cached count the executed and the cached steps.
	Steps  int `json:"steps"`
	Cached int `json:"cached"`
}

// Builder builds templates. It is safe for concurrent use.
type Builder struct {
	store  Store
	runner Runner
	cache  *cacheIndex
	log    *slog.Logger
}

// New returns a builder keeping its step cache index in cacheDir.
func New(store Store, runner Runner, cacheDir string, logger *slog.Logger) (*Builder, error) {
	if store == nil || runner == nil {
		return nil, errors.New("builder: store and runner are required")
	}
	if logger == nil {
		logger = slog.Default()
	}
	if err := os.MkdirAll(cacheDir, 0o700); err != nil {
		return nil, fmt.Errorf("builder: cache dir: %w", err)
	}
	return &Builder{
		store:  store,
		runner: runner,
		cache:  newCacheIndex(filepath.Join(cacheDir, "index.json")),
		log:    logger,
	}, nil
}
