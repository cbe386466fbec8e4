package units

import "testing"

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 1 << 30: "1.0 GiB",
		3 << 29: "1.5 GiB", 20 << 30: "20.0 GiB", 1 << 60: "1.0 EiB", -2048: "-2.0 KiB",
	} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}
