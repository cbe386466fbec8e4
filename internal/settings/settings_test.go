package settings

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// word is a named type that parses itself: lower-cased, never "bad".
type word string

func (w *word) UnmarshalText(b []byte) error {
	if string(b) == "bad" {
		return fmt.Errorf("not that word")
	}
	*w = word(strings.ToLower(string(b)))
	return nil
}

// flag is a named type whose empty value means something (on).
type flag bool

func (f *flag) UnmarshalText(b []byte) error {
	switch string(b) {
	case "", "on":
		*f = true
	case "off":
		*f = false
	default:
		return fmt.Errorf("want on or off")
	}
	return nil
}

type Inner struct {
	Word  word  `env:"T_WORD" envDefault:"Hello" help:"a word"`
	Empty flag  `env:"T_FLAG" envDefault:"off" help:"on when empty"`
	Quota int64 `env:"T_QUOTA" envDefault:"1G" help:"a size"`
}

type outer struct {
	Port    int           `env:"T_PORT" envDefault:"8000" min:"1" max:"65535" help:"a port"`
	IDs     uint32        `env:"T_IDS" envDefault:"10" min:"1" max:"100" help:"a count"`
	Wait    time.Duration `env:"T_WAIT" envDefault:"1.5" help:"seconds"`
	On      bool          `env:"T_ON" envDefault:"yes" help:"pydantic"`
	Mode    string        `env:"T_MODE" envDefault:"auto" oneof:"auto on off" help:"a choice"`
	Dir     string        `env:"T_DIR" envDefault:"/data" notEmpty:"true" help:"not empty"`
	Names   List          `env:"T_NAMES" envDefault:"a, b,,c" help:"a list"`
	Reserve SizeOrZero    `env:"T_RESERVE" envDefault:"0" help:"0 or a size"`
	Free    string        `env:"T_FREE" help:"anything"`
	Derived string        // not a setting
	Inner
}

func load(t *testing.T, src Source) (outer, Loaded, error) {
	t.Helper()
	var o outer
	l, err := Load(src, &o)
	return o, l, err
}

func TestLoadDefaults(t *testing.T) {
	// Only Source.Environ counts, never the process's environment.
	t.Setenv("T_PORT", "1")
	o, l, err := load(t, Source{})
	if err != nil {
		t.Fatal(err)
	}
	want := outer{Port: 8000, IDs: 10, Wait: 1500 * time.Millisecond, On: true, Mode: "auto", Dir: "/data", Names: List{"a", "b", "c"},
		Inner: Inner{Word: "hello", Empty: false, Quota: 1 << 30}}
	if !reflect.DeepEqual(o, want) || len(l.Given) != 0 {
		t.Fatalf("defaults: %+v %v, want %+v", o, l.Given, want)
	}
	if d := Defaults[outer](); !reflect.DeepEqual(d, want) {
		t.Fatalf("Defaults: %+v", d)
	}
}

// Defaults < .env file < environment < overrides; an empty value is
// parsed (it is not a missing one, and not the default).
func TestLoadPrecedenceAndEmptyValues(t *testing.T) {
	env := filepath.Join(t.TempDir(), ".env")
	if err := os.WriteFile(env, []byte("T_PORT=9000\nexport T_WORD=\"File\"\nT_FLAG=\nT_IGNORED=1\nT_NAMES=\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o, l, err := load(t, Source{EnvFile: env, Environ: []string{"T_PORT=9100", "T_ON=", "OTHER=x", "T_WAIT=0"},
		Overrides: map[string]string{"T_PORT": " 9200 ", "T_FREE": ""}, Defaults: map[string]string{"T_DIR": "/host"}, Ignored: []string{"T_IGNORED", "T_UNGIVEN"}})
	if err != nil {
		t.Fatal(err)
	}
	if o.Port != 9200 || o.Word != "file" || !bool(o.Empty) || o.On || o.Names != nil || o.Wait != 0 || o.Dir != "/host" {
		t.Fatalf("loaded %+v", o)
	}
	for _, n := range []string{"T_PORT", "T_WORD", "T_FLAG", "T_ON", "T_WAIT", "T_FREE", "T_IGNORED", "T_NAMES"} {
		if !l.Given[n] {
			t.Errorf("%s not given: %v", n, l.Given)
		}
	}
	if l.Given["OTHER"] || l.Given["T_MODE"] || !reflect.DeepEqual(l.Ignored, []string{"T_IGNORED"}) {
		t.Errorf("given %v, ignored %v", l.Given, l.Ignored)
	}
}

// Every refusal names the setting and the value as given.
func TestLoadErrors(t *testing.T) {
	for _, c := range []struct{ name, value, want string }{
		{"T_PORT", "0", `setting T_PORT="0": want an integer from 1 to 65535`},
		{"T_PORT", "x", `setting T_PORT="x": want an integer from 1 to 65535`},
		{"T_PORT", "", `setting T_PORT="": want an integer from 1 to 65535`},
		{"T_IDS", "4294967297", `setting T_IDS="4294967297": want an integer from 1 to 100`},
		{"T_IDS", "-1", `setting T_IDS="-1": want an integer from 1 to 100`},
		{"T_WAIT", "soon", `setting T_WAIT="soon": want a number of seconds >= 0`},
		{"T_ON", "maybe", `setting T_ON="maybe": want true or false`},
		{"T_MODE", "both", `setting T_MODE="both": want auto, on or off`},
		{"T_MODE", "", `setting T_MODE="": want auto, on or off`},
		{"T_DIR", " ", `setting T_DIR=" ": must not be empty`},
		{"T_WORD", "bad", `setting T_WORD="bad": not that word`},
		{"T_FLAG", "x", `setting T_FLAG="x": want on or off`},
		{"T_QUOTA", "0", `setting T_QUOTA="0": want a size such as 512M or 2G, got "0"`},
		{"T_RESERVE", "lots", `setting T_RESERVE="lots": want a size such as 512M or 2G, got "lots"`},
		{"T_NOPE", "1", `unknown setting T_NOPE`},
	} {
		_, _, err := load(t, Source{Overrides: map[string]string{c.name: c.value}})
		if err == nil || err.Error() != c.want {
			t.Errorf("%s=%q: %v, want %s", c.name, c.value, err, c.want)
		}
	}
	// The first failing setting in field order, of several.
	_, _, err := load(t, Source{Environ: []string{"T_WORD=bad", "T_WAIT=x", "T_PORT=70000"}})
	if err == nil || err.Error() != `setting T_PORT="70000": want an integer from 1 to 65535` {
		t.Errorf("several: %v", err)
	}
	env := filepath.Join(t.TempDir(), "bad.env")
	if err := os.WriteFile(env, []byte("T_PROT=1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := load(t, Source{EnvFile: env}); err == nil || err.Error() != "config file "+env+": unknown setting T_PROT" {
		t.Errorf("unknown name in the file: %v", err)
	}
}

func TestFields(t *testing.T) {
	var o outer
	var names []string
	for _, f := range Fields(&o) {
		names = append(names, f.Name+"="+f.Default)
	}
	want := []string{"T_PORT=8000", "T_IDS=10", "T_WAIT=1.5", "T_ON=yes", "T_MODE=auto", "T_DIR=/data", "T_NAMES=a, b,,c",
		"T_RESERVE=0", "T_FREE=", "T_WORD=Hello", "T_FLAG=off", "T_QUOTA=1G"}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("fields %q, want %q", names, want)
	}
	for _, bad := range []any{
		&struct {
			A string `env:"T_A"`
			B int    `env:"T_A" min:"0" max:"1"`
		}{},
		&struct {
			N int `env:"T_N"`
		}{},
		&struct{ inner struct{ X string } }{},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%T: no panic", bad)
				}
			}()
			Fields(bad)
		}()
	}
}
