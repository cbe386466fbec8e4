package dockertest

import (
	"bytes"
	"testing"
)

// TestRootfsTarDeterministic: the image is named after the tarball's hash,
// so the same content must give the same bytes, or every run would import
// (and leave behind) a new image.
func TestRootfsTarDeterministic(t *testing.T) {
	a, err := RootfsTar(Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		b, err := RootfsTar(Options{})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a.Bytes(), b.Bytes()) {
			t.Fatal("two tarballs of the same content differ")
		}
	}
}
