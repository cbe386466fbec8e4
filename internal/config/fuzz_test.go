package config

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// FuzzParseSize: every accepted size is a positive byte count (never NaN,
// infinity or a wrapped-around negative), and plain byte counts round-trip.
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"512M", "1.5GiB", "1048576", "0", "-1G", "NaN", "Inf", "+Inf", "1e30G", "0.0001", "9223372036854775807", "8E", " 2 g ", "0x10", "1_0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		if err != nil {
			return
		}
		if n <= 0 {
			t.Fatalf("ParseSize(%q) = %d", s, n)
		}
		if n < 1<<53 { // exact in a float64
			back, err := ParseSize(strconv.FormatInt(n, 10))
			if err != nil || back != n {
				t.Fatalf("ParseSize(%d) = %d, %v", n, back, err)
			}
		}
	})
}

// FuzzDotenv parses arbitrary .env files, then loads them as the daemon
// does. Keys are non-empty and trimmed, values are single lines, a
// written KEY="value" file reads back the same, and Load either refuses
// the file or returns a configuration that passed validation.
func FuzzDotenv(f *testing.F) {
	f.Add("HOST=0.0.0.0\nPORT=8000\n# comment\nexport API_KEYS=\"a:b,c\"\n", "X", "v")
	f.Add("=x\n", "A_B", "with # hash")
	f.Add("MAX_SANDBOXES=1e9999\nDEFAULT_DISK=NaN\n", "K", "'single'")
	f.Add("PORT=99999\n", "K", "")
	f.Add("DEFAULT_MEMORY='1.5G' # note\r\nSTORAGE_FOLDER=../../x\n", "K", "é\x00")
	f.Add("\xff\xfe=\n", "K", strings.Repeat("v", 5000))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, content, key, value string) {
		p := filepath.Join(dir, "fuzz.env")
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		vals, err := ParseDotenv(p)
		if err == nil {
			for k, v := range vals {
				if k == "" || k != strings.TrimSpace(k) || strings.ContainsAny(k, "=\n") || strings.Contains(v, "\n") {
					t.Fatalf("%q: parsed %q=%q", content, k, v)
				}
			}
		}
		c, lerr := Load(p, nil, nil)
		if lerr == nil {
			if c == nil {
				t.Fatalf("%q: no config and no error", content)
			}
			if err := c.validate(); err != nil {
				t.Fatalf("%q: Load accepted an invalid config: %v", content, err)
			}
		}
		if err != nil && lerr == nil {
			t.Fatalf("%q: ParseDotenv fails (%v) but Load accepts", content, err)
		}
		// Round trip of one quoted value.
		k := strings.Map(func(r rune) rune {
			if r >= 'A' && r <= 'Z' || r == '_' {
				return r
			}
			return -1
		}, strings.ToUpper(key))
		if k == "" || strings.ContainsAny(value, "\"\n\r") || strings.TrimSpace(value) != value {
			return
		}
		if err := os.WriteFile(p, []byte(k+"=\""+value+"\"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		vals, err = ParseDotenv(p)
		if err != nil || vals[k] != value {
			t.Fatalf("%s=%q read back as %q (%v)", k, value, vals[k], err)
		}
	})
}
