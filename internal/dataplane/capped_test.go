package dataplane

import "testing"

// A buffered stream keeps exactly its first max bytes and grows to the
// cap directly once past smallOutput, never beyond it.
func TestSecurityCappedBuffer(t *testing.T) {
	c := cappedBuffer{max: 3 * smallOutput}
	chunk := make([]byte, 32<<10)
	for i := 0; i < 4*smallOutput/len(chunk) && !c.truncated; i++ {
		c.write(chunk)
	}
	if len(c.buf) != c.max || cap(c.buf) != c.max || !c.truncated {
		t.Fatalf("len %d cap %d truncated %v; want %d, %d, true", len(c.buf), cap(c.buf), c.truncated, c.max, c.max)
	}
	small := cappedBuffer{max: 10}
	small.write([]byte("hello"))
	small.write([]byte("world!"))
	if string(small.buf) != "helloworld" || !small.truncated || cap(small.buf) > 10 {
		t.Fatalf("small: %q cap %d truncated %v", small.buf, cap(small.buf), small.truncated)
	}
}
