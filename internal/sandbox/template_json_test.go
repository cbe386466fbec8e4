package sandbox

import (
	"encoding/json"
	"reflect"
	"testing"
)

// TestTemplateJSONLegacy: records written before templates were resolved
// hold a string; they still decode, and resolved ones round-trip.
func TestTemplateJSONLegacy(t *testing.T) {
	cases := map[string]Template{
		`{"id":"a","template":"host"}`:        HostTemplate(),
		`{"id":"a","template":""}`:            HostTemplate(),
		`{"id":"a","template":"dir:/srv/fs"}`: {Ref: "dir:/srv/fs", Kind: TemplateDir, Dir: "/srv/fs"},
	}
	for in, want := range cases {
		var s Spec
		if err := json.Unmarshal([]byte(in), &s); err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		if !reflect.DeepEqual(s.Template, want) {
			t.Errorf("%s: %+v, want %+v", in, s.Template, want)
		}
	}
	var s Spec
	if err := json.Unmarshal([]byte(`{"template":"docker://x"}`), &s); err == nil {
		t.Error("an unknown legacy template string decoded")
	}
	img := Template{Ref: "py:3", Digest: "sha256:ab", Kind: TemplateImage, Layers: []string{"/l/1", "/l/2"},
		Config: ImageConfig{Env: []string{"A=b"}, WorkingDir: "/app", User: "app"}}
	data, err := json.Marshal(Spec{ID: "x", Template: img})
	if err != nil {
		t.Fatal(err)
	}
	var back Spec
	if err := json.Unmarshal(data, &back); err != nil || !reflect.DeepEqual(back.Template, img) {
		t.Fatalf("round trip: %+v %v", back.Template, err)
	}
}
