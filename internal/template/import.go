package template

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// Import stores the image or root filesystem at path (a docker save
// tarball, an OCI archive or layout directory, a root filesystem directory
// or tarball, plain or gzip/zstd-compressed) as template name. A root
// filesystem becomes one layer. Name "" takes the name an archive carries
// (docker save's tag, containerd's image name annotation).
func (s *Store) Import(ctx context.Context, p, tmplName string, progress func(Progress)) (Info, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return Info{}, sandbox.Wrap(sandbox.ClassNotFound, err, fmt.Sprintf("import: %v", err))
	}
	base := filepath.Base(p)
	if fi.IsDir() {
		switch {
		case exists(filepath.Join(p, "oci-layout")):
			return s.importLayout(ctx, p, tmplName, "oci-layout:"+base, progress)
		case exists(filepath.Join(p, "manifest.json")) && exists(filepath.Join(p, "repositories")):
			return Info{}, sandbox.Errorf(sandbox.ClassInvalid, "import %s: this looks like an unpacked `docker save` archive; import the tarball itself", base)
		}
		return s.importRootfsDir(ctx, p, tmplName, progress)
	}
	if !fi.Mode().IsRegular() {
		return Info{}, sandbox.Errorf(sandbox.ClassInvalid, "import %s: not a regular file or directory", base)
	}
	kind, sizes, err := scanArchive(ctx, p)
	if err != nil {
		return Info{}, fmt.Errorf("import %s: %w", base, err)
	}
	switch kind {
	case archiveDocker:
		return s.importDockerArchive(ctx, p, tmplName, sizes, progress)
	case archiveOCI:
		return s.importOCIArchive(ctx, p, tmplName, progress)
	}
	return s.importRootfsTar(ctx, p, tmplName, progress)
}

type archiveKind int

const (
	archiveRootfs archiveKind = iota
	archiveDocker
	archiveOCI
)

// imageArchiveEntry matches the top-level names of docker save archives
// (docker's "<id>/layer.tar", "<id>.json"; go-containerregistry's
// "sha256:<id>", "<id>.tar.gz") and OCI archives; any other name means a
// root filesystem tarball, found without reading it all.
var imageArchiveEntry = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^(manifest\.json|repositories|index\.json|oci-layout|blobs|(sha256:)?[a-f0-9]{64}(\.[a-z.]{1,16})?)$`)
})

// openTar opens a possibly compressed tarball.
func openTar(p string) (io.ReadCloser, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	r, err := decompress(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	return readCloser{r, func() error { r.Close(); return f.Close() }}, nil
}

type readCloser struct {
	io.Reader
	close func() error
}

func (r readCloser) Close() error { return r.close() }

// scanArchive tells a docker save archive, an OCI archive and a root
// filesystem tarball apart by their entries, and returns the sizes of an
// image archive's entries (to bound the small files read whole).
func scanArchive(ctx context.Context, p string) (archiveKind, map[string]int64, error) {
	rc, err := openTar(p)
	if err != nil {
		return 0, nil, err
	}
	defer rc.Close()
	tr := tar.NewReader(ctxReader{ctx, rc})
	sizes := map[string]int64{}
	for i := 0; ; i++ {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if i == 0 {
				return 0, nil, sandbox.Errorf(sandbox.ClassInvalid, "not a tar archive (plain, gzip or zstd), nor a directory: %v", err)
			}
			return 0, nil, sandbox.Wrap(sandbox.ClassInvalid, err, fmt.Sprintf("corrupt tar archive: %v", err))
		}
		n := strings.TrimPrefix(path.Clean("/"+h.Name), "/")
		top, _, _ := strings.Cut(n, "/")
		if n != "" && !imageArchiveEntry().MatchString(top) {
			return archiveRootfs, nil, nil
		}
		sizes[n] = h.Size
	}
	_, docker := sizes["manifest.json"]
	_, oci := sizes["oci-layout"]
	switch {
	case docker:
		return archiveDocker, sizes, nil
	case oci:
		return archiveOCI, sizes, nil
	}
	return archiveRootfs, nil, nil
}

// importDockerArchive imports a `docker save` tarball with ggcr's tarball
// package. Its layers are kept uncompressed, as docker wrote them.
func (s *Store) importDockerArchive(ctx context.Context, p, tmplName string, sizes map[string]int64, progress func(Progress)) (Info, error) {
	base := filepath.Base(p)
	if sizes["manifest.json"] > maxManifestBytes {
		return Info{}, sandbox.Errorf(sandbox.ClassTooLarge, "import %s: manifest.json is over %d bytes", base, maxManifestBytes)
	}
	opener := func() (io.ReadCloser, error) { return openTar(p) }
	m, err := tarball.LoadManifest(opener)
	if err != nil {
		return Info{}, sandbox.Wrap(sandbox.ClassInvalid, err, fmt.Sprintf("import %s: bad manifest.json: %v", base, err))
	}
	desc, err := pickDockerImage(m, tmplName)
	if err != nil {
		return Info{}, fmt.Errorf("import %s: %w", base, err)
	}
	if len(desc.Layers) > maxImageLayers {
		return Info{}, sandbox.Errorf(sandbox.ClassTooLarge, "import %s: image has %d layers, over the limit of %d", base, len(desc.Layers), maxImageLayers)
	}
	if sz, ok := sizes[path.Clean(desc.Config)]; !ok || sz > maxConfigBytes {
		return Info{}, sandbox.Errorf(sandbox.ClassInvalid, "import %s: image config %q is missing or over %d bytes", base, desc.Config, maxConfigBytes)
	}
	var tag *name.Tag
	if len(desc.RepoTags) > 0 {
		t, err := name.NewTag(desc.RepoTags[0])
		if err != nil {
			return Info{}, sandbox.Errorf(sandbox.ClassInvalid, "import %s: bad tag %q: %v", base, desc.RepoTags[0], err)
		}
		tag = &t
	}
	img, err := tarball.Image(opener, tag)
	if err != nil {
		return Info{}, sandbox.Wrap(sandbox.ClassInvalid, err, fmt.Sprintf("import %s: %v", base, err))
	}
	raw, err := img.RawConfigFile()
	if err != nil {
		return Info{}, sandbox.Wrap(sandbox.ClassInvalid, err, fmt.Sprintf("import %s: read config: %v", base, err))
	}
	cfg, err := parseConfig(raw, len(desc.Layers))
	if err != nil {
		return Info{}, fmt.Errorf("import %s: %w", base, err)
	}
	src := imageSrc{rawConfig: raw, config: cfg, source: "docker-archive:" + base}
	for _, diff := range cfg.RootFS.DiffIDs {
		src.layers = append(src.layers, layerSrc{
			diffID: diff, blob: diff, size: -1, media: types.DockerUncompressedLayer,
			open: func() (io.ReadCloser, error) {
				l, err := img.LayerByDiffID(diff)
				if err != nil {
					return nil, err
				}
				return l.Uncompressed()
			},
		})
	}
	r, err := s.importName(tmplName, desc.RepoTags, base)
	if err != nil {
		return Info{}, err
	}
	return s.storeImage(ctx, r, src, progress)
}

// pickDockerImage picks the image of a docker save archive: the only one,
// or the one tagged tmplName.
func pickDockerImage(m tarball.Manifest, tmplName string) (tarball.Descriptor, error) {
	if len(m) == 1 {
		return m[0], nil
	}
	if len(m) == 0 {
		return tarball.Descriptor{}, sandbox.Errorf(sandbox.ClassInvalid, "the archive holds no image")
	}
	var tags []string
	for _, d := range m {
		for _, t := range d.RepoTags {
			if t == tmplName || t == tmplName+":"+DefaultTag {
				return d, nil
			}
			tags = append(tags, t)
		}
	}
	return tarball.Descriptor{}, sandbox.Errorf(sandbox.ClassInvalid, "the archive holds %d images; name one of its tags (%s)", len(m), strings.Join(tags, ", "))
}

// importName is the name an import stores under: the caller's, else the
// archive's own.
func (s *Store) importName(tmplName string, archiveNames []string, base string) (ref, error) {
	if tmplName != "" {
		return parseRef(tmplName)
	}
	for _, n := range archiveNames {
		if n == "" {
			continue
		}
		if r, err := nameFromImageRef(n); err == nil {
			return r, nil
		}
	}
	return ref{}, sandbox.Errorf(sandbox.ClassInvalid, "import %s: the archive names no image; give a template name", base)
}

// importLayout imports the image of an OCI layout directory.
func (s *Store) importLayout(ctx context.Context, dir, tmplName, source string, progress func(Progress)) (Info, error) {
	if fi, err := os.Stat(filepath.Join(dir, "index.json")); err != nil || fi.Size() > maxManifestBytes {
		return Info{}, sandbox.Errorf(sandbox.ClassInvalid, "import %s: index.json is missing or over %d bytes", source, maxManifestBytes)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return Info{}, sandbox.Wrap(sandbox.ClassInvalid, err, fmt.Sprintf("import %s: %v", source, err))
	}
	plat, _ := pullPlatform("")
	img, desc, err := pickFromIndex(dir, idx, plat, 0)
	if err != nil {
		return Info{}, fmt.Errorf("import %s: %w", source, err)
	}
	src, err := fromImage(img, source)
	if err != nil {
		return Info{}, fmt.Errorf("import %s: %w", source, err)
	}
	r, err := s.importName(tmplName, []string{desc.Annotations["io.containerd.image.name"]}, source)
	if err != nil {
		return Info{}, err
	}
	return s.storeImage(ctx, r, src, progress)
}

// maxIndexDepth bounds nested indexes.
const maxIndexDepth = 2

// pickFromIndex picks the image of an OCI index: the only one, else the
// first for platform. The manifest is checked against its descriptor
// (ggcr's layout reader does not).
func pickFromIndex(dir string, idx v1.ImageIndex, plat v1.Platform, depth int) (v1.Image, v1.Descriptor, error) {
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, v1.Descriptor{}, sandbox.Wrap(sandbox.ClassInvalid, err, fmt.Sprintf("bad index: %v", err))
	}
	var cands []v1.Descriptor
	for _, d := range im.Manifests {
		if d.MediaType.IsImage() || d.MediaType.IsIndex() {
			cands = append(cands, d)
		}
	}
	var pick *v1.Descriptor
	if len(cands) == 1 {
		pick = &cands[0]
	}
	var seen []string
	for i := 0; pick == nil && i < len(cands); i++ {
		if p := cands[i].Platform; p != nil {
			if p.Satisfies(plat) {
				pick = &cands[i]
			}
			seen = append(seen, p.String())
		}
	}
	if pick == nil {
		return nil, v1.Descriptor{}, sandbox.Errorf(sandbox.ClassNotFound, "no image for %s among %d manifests (platforms: %s)", plat.String(), len(cands), strings.Join(seen, ", "))
	}
	if !digestPattern().MatchString(pick.Digest.String()) || pick.Size < 0 || pick.Size > maxManifestBytes {
		return nil, v1.Descriptor{}, sandbox.Errorf(sandbox.ClassInvalid, "manifest %s: bad digest or over %d bytes", pick.Digest, maxManifestBytes)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "blobs", "sha256", pick.Digest.Hex)); err != nil || !fi.Mode().IsRegular() || fi.Size() != pick.Size {
		return nil, v1.Descriptor{}, sandbox.Errorf(sandbox.ClassInvalid, "manifest %s is missing or not %d bytes", pick.Digest, pick.Size)
	}
	if pick.MediaType.IsIndex() {
		if depth >= maxIndexDepth {
			return nil, v1.Descriptor{}, sandbox.Errorf(sandbox.ClassInvalid, "indexes nested deeper than %d", maxIndexDepth)
		}
		child, err := idx.ImageIndex(pick.Digest)
		if err != nil {
			return nil, v1.Descriptor{}, sandbox.Wrap(sandbox.ClassInvalid, err, fmt.Sprintf("bad index: %v", err))
		}
		if raw, err := child.RawManifest(); err != nil || sha256Hash(raw) != pick.Digest {
			return nil, v1.Descriptor{}, sandbox.Errorf(sandbox.ClassInvalid, "index %s does not match its digest", pick.Digest)
		}
		img, _, err := pickFromIndex(dir, child, plat, depth+1)
		return img, *pick, err
	}
	img, err := idx.Image(pick.Digest)
	if err != nil {
		return nil, v1.Descriptor{}, sandbox.Wrap(sandbox.ClassInvalid, err, fmt.Sprintf("bad image: %v", err))
	}
	if raw, err := img.RawManifest(); err != nil || sha256Hash(raw) != pick.Digest {
		return nil, v1.Descriptor{}, sandbox.Errorf(sandbox.ClassInvalid, "manifest %s does not match its digest", pick.Digest)
	}
	return img, *pick, nil
}
