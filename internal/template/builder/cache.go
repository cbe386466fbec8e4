package builder

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// CachePrefix is the reserved template name prefix of intermediate build
// steps. The store lists them apart and may garbage-collect them; a
// collected one is simply a cache miss.
const CachePrefix = "build-cache/" // template.VisibleTo hides it from tenants

// CacheName is the intermediate template name of a step's cache key.
func CacheName(key string) string { return CachePrefix + key[:32] }

// maxCacheEntries bounds the index; the least recently used go first.
const maxCacheEntries = 20000

// cacheEntry is one cached step.
type cacheEntry struct {
	Name   string    `json:"name"`
	Digest string    `json:"digest"`
	Used   time.Time `json:"used"`
}

// cacheIndex maps step cache keys to committed intermediate templates,
// in a JSON file rewritten atomically.
type cacheIndex struct {
	mu   sync.Mutex
	file string
}

func newCacheIndex(file string) *cacheIndex { return &cacheIndex{file: file} }

func (c *cacheIndex) load() (map[string]cacheEntry, error) {
	data, err := os.ReadFile(c.file)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]cacheEntry{}, nil
	}
	if err != nil {
		return nil, err
	}
	m := map[string]cacheEntry{}
	if err := json.Unmarshal(data, &m); err != nil {
		// A damaged index only costs a rebuild.
		return map[string]cacheEntry{}, nil
	}
	return m, nil
}

func (c *cacheIndex) get(key string) (cacheEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, err := c.load()
	if err != nil {
		return cacheEntry{}, false
	}
	e, ok := m[key]
	return e, ok
}

func (c *cacheIndex) put(key string, e cacheEntry) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, err := c.load()
	if err != nil {
		return err
	}
	m[key] = e
	if len(m) > maxCacheEntries {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool { return m[keys[i]].Used.Before(m[keys[j]].Used) })
		for _, k := range keys[:len(m)-maxCacheEntries] {
			delete(m, k)
		}
	}
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(c.file), ".index-*")
	if err != nil {
		return fmt.Errorf("cache index: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("cache index: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("cache index: %w", err)
	}
	return os.Rename(tmp.Name(), c.file)
}

// chainKey derives a step's cache key from its parent's and the step's
// expanded text and extras (content hashes, build args).
func chainKey(parent string, parts ...string) string {
	h := sha256.New()
	h.Write([]byte(parent))
	for _, p := range parts {
		h.Write([]byte{0})
		h.Write([]byte(p))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// short is the 12-character form of a digest or key.
func short(d string) string {
	d = strings.TrimPrefix(d, "sha256:")
	if len(d) > 12 {
		return d[:12]
	}
	return d
}
