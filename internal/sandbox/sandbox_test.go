package sandbox

import "testing"

func TestIDValidate(t *testing.T) {
	for _, ok := range []ID{"a", "abc123", "a-b", NewID(), ID("a23456789012345678901234567890123456789012345678901234567890123")} {
		if err := ok.Validate(); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []ID{"", "-a", "A", "a_b", "a/b", "../x", "a b", ID("a234567890123456789012345678901234567890123456789012345678901234")} {
		if err := bad.Validate(); ClassOf(err) != ClassInvalid {
			t.Errorf("%q: %v, want invalid", bad, err)
		}
	}
}
