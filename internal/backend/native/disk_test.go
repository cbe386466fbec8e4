package native

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestSecurityDiskBuckets: whatever sizes callers ask for, disks come in a
// bounded set of sizes, never smaller than asked and at most 25% larger.
func TestSecurityDiskBuckets(t *testing.T) {
	const mib, gib = 1 << 20, 1 << 30
	for _, c := range []struct{ in, want int64 }{
		{1, minDiskBytes},
		{32 * mib, 32 * mib},
		{33 * mib, 40 * mib},
		{1 * gib, 1 * gib},
		{1*gib + 1, 1280 * mib},
		{1100 * mib, 1280 * mib},
		{1536 * mib, 1536 * mib},
		{1537 * mib, 1792 * mib},
		{20 * gib, 20 * gib},
		{maxDiskBytes, maxDiskBytes},
	} {
		if got := diskBucket(c.in); got != c.want {
			t.Errorf("diskBucket(%d) = %d, want %d", c.in, got, c.want)
		}
	}
	seen := map[int64]bool{}
	for size := int64(minDiskBytes); size <= 64*gib; size += 7*mib + 12345 {
		b := diskBucket(size)
		if b < size || float64(b) > 1.25*float64(size) || b%mib != 0 {
			t.Fatalf("diskBucket(%d) = %d: want in [size, 1.25 size], MiB-aligned", size, b)
		}
		seen[b] = true
	}
	// 32 MiB .. 64 GiB is 11 doublings of 4 steps each.
	if len(seen) > 45 {
		t.Errorf("%d distinct sizes for 32 MiB..64 GiB, want at most 45", len(seen))
	}
}

// TestSecurityDiskCacheEviction: the formatted-image cache keeps only the
// most recently used images.
func TestSecurityDiskCacheEviction(t *testing.T) {
	c := &diskCache{dir: t.TempDir()}
	base := time.Now().Add(-time.Hour)
	for i := int64(1); i <= 5; i++ {
		p := c.templatePath(i << 20)
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		at := base.Add(time.Duration(i) * time.Minute)
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
	}
	if !c.touch(c.templatePath(1 << 20)) { // the oldest becomes the newest
		t.Fatal("touch of a cached image failed")
	}
	// Not an image: a template being built, never evicted.
	if err := os.WriteFile(filepath.Join(c.dir, "ext4-123.tmp"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	c.evict(2)
	for i, want := range map[int64]bool{1: true, 2: false, 3: false, 4: false, 5: true} {
		_, err := os.Stat(c.templatePath(i << 20))
		if got := err == nil; got != want {
			t.Errorf("image %d MiB kept = %v, want %v", i, got, want)
		}
	}
	if _, err := os.Stat(filepath.Join(c.dir, "ext4-123.tmp")); err != nil {
		t.Errorf("a template being built was evicted: %v", err)
	}
	if c.touch(c.templatePath(99 << 20)) {
		t.Error("touch of a missing image reported it cached")
	}
}
