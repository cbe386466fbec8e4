package api

import (
	"os"
	"testing"
)

func TestReferenceIsCurrent(t *testing.T) {
	want, err := Reference()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatal("docs/api.md is stale: run `go run ./scripts/apidoc > docs/api.md`")
	}
}
