package builder

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	securejoin "github.com/cyphar/filepath-securejoin"
	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
)

// srcNode is one file of a COPY/ADD source.
type srcNode struct {
	rel  string // rooted path in its source ("/dir/file")
	info fs.FileInfo
	host string // host path to read it from
	// view is set for nodes of a stage or image (COPY --from).
	view  *entry
	owned bool // keep the file's own uid/gid (stages and images)
	// ignored: a directory .dockerignore excludes, walked only because
	// an exclusion ("!pattern") may re-include something below it.
	ignored bool
}

// source is where COPY/ADD read files: the build context or another
// stage's or image's root filesystem.
type source interface {
	// lookup resolves p, following symlinks scoped to the source's root.
	lookup(p string) (srcNode, error)
	// children lists a directory, sorted, without following symlinks.
	children(n srcNode) ([]srcNode, error)
	// open opens a regular file.
	open(n srcNode) (io.ReadCloser, error)
}

// contextSource is the build context directory with its .dockerignore.
type contextSource struct {
	dir string
	pm  *patternmatcher.PatternMatcher // nil: nothing ignored
}

// maxIgnoreBytes bounds .dockerignore.
const maxIgnoreBytes = 1 << 20

func newContextSource(dir string) (*contextSource, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("build context: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("build context %s: not a directory", dir)
	}
	cs := &contextSource{dir: abs}
	f, err := openNoFollow(filepath.Join(abs, ".dockerignore"))
	if errors.Is(err, fs.ErrNotExist) {
		return cs, nil
	}
	if err != nil {
		return nil, fmt.Errorf(".dockerignore: %w", err)
	}
	defer f.Close()
	patterns, err := ignorefile.ReadAll(io.LimitReader(f, maxIgnoreBytes))
	if err != nil {
		return nil, fmt.Errorf(".dockerignore: %w", err)
	}
	if len(patterns) > 0 {
		if cs.pm, err = patternmatcher.New(patterns); err != nil {
			return nil, fmt.Errorf(".dockerignore: %w", err)
		}
	}
	return cs, nil
}

// ignored says whether .dockerignore excludes rel (rooted).
func (c *contextSource) ignored(rel string) bool {
	if c.pm == nil || rel == "/" {
		return false
	}
	m, err := c.pm.MatchesOrParentMatches(strings.TrimPrefix(rel, "/"))
	return err == nil && m
}

func (c *contextSource) lookup(p string) (srcNode, error) {
	rel := path.Clean("/" + p)
	if c.ignored(rel) {
		return srcNode{}, fmt.Errorf("%s: not found in the build context or excluded by .dockerignore", rel)
	}
	host, err := securejoin.SecureJoin(c.dir, rel)
	if err != nil {
		return srcNode{}, fmt.Errorf("%s: %w", rel, err)
	}
	fi, err := os.Lstat(host)
	if err != nil {
		return srcNode{}, fmt.Errorf("%s: not found in the build context", rel)
	}
	resolved := "/" + filepath.ToSlash(strings.TrimPrefix(strings.TrimPrefix(host, c.dir), "/"))
	if c.ignored(resolved) {
		return srcNode{}, fmt.Errorf("%s: not found in the build context or excluded by .dockerignore", rel)
	}
	return srcNode{rel: resolved, info: fi, host: host}, nil
}

func (c *contextSource) children(n srcNode) ([]srcNode, error) {
	des, err := os.ReadDir(n.host)
	if err != nil {
		return nil, err
	}
	var out []srcNode
	for _, de := range des {
		rel := path.Join(n.rel, de.Name())
		// An ignored directory is still walked when a later "!pattern"
		// may re-include something inside it.
		ign := c.ignored(rel)
		if ign && !(de.IsDir() && c.pm.Exclusions()) {
			continue
		}
		host := filepath.Join(n.host, de.Name())
		fi, err := os.Lstat(host)
		if err != nil {
			return nil, err
		}
		out = append(out, srcNode{rel: rel, info: fi, host: host, ignored: ign})
	}
	return out, nil
}

// hasIncluded reports whether an ignored directory holds anything an
// exclusion re-includes (then it is copied with just those).
func hasIncluded(src source, n srcNode) (bool, error) {
	kids, err := src.children(n)
	if err != nil {
		return false, err
	}
	for _, k := range kids {
		if !k.ignored {
			return true, nil
		}
		if ok, err := hasIncluded(src, k); ok || err != nil {
			return ok, err
		}
	}
	return false, nil
}

func (c *contextSource) open(n srcNode) (io.ReadCloser, error) { return openNoFollow(n.host) }

// viewSource is a stage's or image's root filesystem (COPY --from).
type viewSource struct{ v *rootView }

func (s viewSource) lookup(p string) (srcNode, error) {
	e, resolved, err := s.v.resolve(path.Clean("/"+p), true)
	if err != nil {
		return srcNode{}, fmt.Errorf("%s: %w", p, err)
	}
	return srcNode{rel: resolved, info: e.info, host: e.host, view: e, owned: true}, nil
}

func (s viewSource) children(n srcNode) ([]srcNode, error) {
	names, err := s.v.readDir(n.view)
	if err != nil {
		return nil, err
	}
	out := make([]srcNode, 0, len(names))
	for _, name := range names {
		e, err := s.v.child(n.view, name)
		if err != nil {
			return nil, err
		}
		out = append(out, srcNode{rel: path.Join(n.rel, name), info: e.info, host: e.host, view: e, owned: true})
	}
	return out, nil
}

func (s viewSource) open(n srcNode) (io.ReadCloser, error) { return openNoFollow(n.host) }

// hasWildcards reports whether a COPY source is a pattern.
func hasWildcards(p string) bool { return strings.ContainsAny(p, "*?[") }

// maxGlobMatches bounds what one wildcard source may select.
const maxGlobMatches = 100000

// glob matches a rooted pattern against src, walking only as deep as
// the pattern has components. Patterns follow filepath.Match, per path.
func glob(src source, pattern string) ([]srcNode, error) {
	pattern = path.Clean("/" + pattern)
	parts := splitPath(pattern)
	root, err := src.lookup("/")
	if err != nil {
		return nil, err
	}
	level := []srcNode{root}
	for i, part := range parts {
		var next []srcNode
		for _, n := range level {
			if !n.info.IsDir() {
				continue
			}
			kids, err := src.children(n)
			if err != nil {
				return nil, err
			}
			for _, k := range kids {
				ok, err := path.Match(part, path.Base(k.rel))
				if err != nil {
					return nil, fmt.Errorf("bad pattern %q: %w", pattern, err)
				}
				if !ok {
					continue
				}
				if i < len(parts)-1 && k.info.Mode()&fs.ModeSymlink != 0 {
					// Resolve an intermediate symlink within the source.
					if k, err = src.lookup(k.rel); err != nil {
						continue
					}
				}
				next = append(next, k)
				if len(next) > maxGlobMatches {
					return nil, fmt.Errorf("pattern %q matches more than %d files", pattern, maxGlobMatches)
				}
			}
		}
		level = next
	}
	sort.Slice(level, func(i, j int) bool { return level[i].rel < level[j].rel })
	return level, nil
}
