// Package settings loads agentbox's settings into the typed settings
// structs of the components that use them.
//
// A setting is an exported field tagged with its name, its default and a
// line of help:
//
//	DefaultTimeout time.Duration `env:"DEFAULT_TIMEOUT" envDefault:"300" help:"seconds a sandbox lives ..."`
//
// Integer settings also carry their bounds (min, max); a value outside
// them is refused. A string setting may name its only values
// (oneof:"a b") or refuse to be empty (notEmpty:"true").
// github.com/caarlos0/env parses the values, with agentbox's parsers for
// its types (parse.go): durations are seconds, booleans take pydantic's
// spellings (agentscope's .env files), int64 fields are sizes (512M, 1G),
// and named types parse themselves (encoding.TextUnmarshaler). Values
// come from the defaults, a .env file, the environment and overrides
// (flags), each over the one before; a name a .env file or an override
// gives must be a setting.
package settings

import (
	"encoding"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/caarlos0/env/v11"
)

// Field is one setting.
type Field struct {
	// Name is the setting's name (its env tag), Default its value when
	// nothing gives one, Help what it does.
	Name, Default, Help string

	field reflect.StructField
	value reflect.Value // settable, in the struct being loaded
	root  int           // index of that struct among Load's
}

// Fields lists the settings of the structs dsts point to (settings
// structs nested in them included), in field order. A name declared twice
// or an integer setting without bounds is a programming error: it panics.
func Fields(dsts ...any) []Field {
	var out []Field
	seen := map[string]bool{}
	for i, dst := range dsts {
		v := reflect.ValueOf(dst)
		if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
			panic(fmt.Sprintf("settings: %T is not a pointer to a struct", dst))
		}
		walk(v.Elem(), func(f reflect.StructField, fv reflect.Value) {
			name := f.Tag.Get("env")
			if seen[name] {
				panic("settings: " + name + " is declared twice")
			}
			seen[name] = true
			if isInteger(f.Type) && (f.Tag.Get("min") == "" || f.Tag.Get("max") == "") {
				panic("settings: integer setting " + name + " needs min and max")
			}
			out = append(out, Field{Name: name, Default: f.Tag.Get("envDefault"), Help: f.Tag.Get("help"), field: f, value: fv, root: i})
		})
	}
	return out
}

// walk calls fn for every tagged field of v, going into untagged struct
// fields as the parser does.
func walk(v reflect.Value, fn func(reflect.StructField, reflect.Value)) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			if f.Type.Kind() == reflect.Struct || f.Tag.Get("env") != "" {
				// The parser cannot set it either: a setting there would
				// silently keep its zero value.
				panic("settings: field " + f.Name + " of " + t.String() + " is not exported")
			}
			continue
		}
		if name := f.Tag.Get("env"); name != "" && name != "-" {
			fn(f, v.Field(i))
			continue
		}
		if f.Type.Kind() == reflect.Struct {
			walk(v.Field(i), fn)
		}
	}
}

// Source is where values come from besides the defaults, lowest
// precedence first.
type Source struct {
	// EnvFile is a .env file (ParseDotenv); "" is none.
	EnvFile string
	// Environ holds NAME=value entries (os.Environ); names that are not
	// settings are left alone.
	Environ []string
	// Overrides are values by setting name (command-line flags).
	Overrides map[string]string
	// Defaults replace the tags' defaults of the settings they name, for
	// defaults that depend on the host (who runs the daemon).
	Defaults map[string]string
	// Ignored are names accepted without effect (other deployments'
	// settings, so their .env files load); Loaded reports those given.
	Ignored []string
}

// Loaded is what Load learned besides the values.
type Loaded struct {
	// Given are the settings a .env file, the environment or an override
	// set (whatever the value).
	Given map[string]bool
	// Ignored are the Source.Ignored names given, in their order there.
	Ignored []string
}

// Load sets the settings of the structs dsts point to (zero values: every
// setting is set) from src. An error names the setting and its value:
// setting NAME="value": why.
func Load(src Source, dsts ...any) (Loaded, error) {
	fields := Fields(dsts...)
	known := map[string]bool{}
	values := map[string]string{}
	for _, f := range fields {
		known[f.Name] = true
		values[f.Name] = f.Default
		if d, ok := src.Defaults[f.Name]; ok {
			values[f.Name] = d
		}
	}
	for _, n := range src.Ignored {
		known[n] = true
	}
	loaded := Loaded{Given: map[string]bool{}}
	if src.EnvFile != "" {
		fileVals, err := ParseDotenv(src.EnvFile)
		if err != nil {
			return Loaded{}, err
		}
		for k, v := range fileVals {
			if !known[k] {
				return Loaded{}, fmt.Errorf("config file %s: unknown setting %s", src.EnvFile, k)
			}
			values[k], loaded.Given[k] = v, true
		}
	}
	for _, kv := range src.Environ {
		if k, v, ok := strings.Cut(kv, "="); ok && known[k] {
			values[k], loaded.Given[k] = v, true
		}
	}
	for k, v := range src.Overrides {
		if !known[k] {
			return Loaded{}, fmt.Errorf("unknown setting %s", k)
		}
		values[k], loaded.Given[k] = v, true
	}
	for _, n := range src.Ignored {
		if loaded.Given[n] {
			loaded.Ignored = append(loaded.Ignored, n)
		}
	}
	if err := parse(fields, values, dsts); err != nil {
		return Loaded{}, err
	}
	return loaded, nil
}

// Defaults returns a T with every setting at its default (the components'
// fallbacks for a zero Config field: the default lives in one place, the
// tag). A default that does not parse panics.
func Defaults[T any]() T {
	var t T
	if _, err := Load(Source{}, &t); err != nil {
		panic(fmt.Sprintf("settings: defaults of %T: %v", t, err))
	}
	return t
}

// parse sets the fields from values (trimmed): the parser does the
// values that are not empty, in one pass over each struct; an empty value
// it leaves alone, so those are parsed here (an empty value means
// something to many settings: off, none, or an error). On an error each
// setting is parsed alone, in order, to name the first that fails.
func parse(fields []Field, values map[string]string, dsts []any) error {
	given := map[string]string{}
	for _, f := range fields {
		if v := strings.TrimSpace(values[f.Name]); v != "" {
			given[f.Name] = v
		}
	}
	failed := false
	for _, dst := range dsts {
		if err := envParse(dst, given); err != nil {
			failed = true
		}
	}
	for _, f := range fields {
		v := strings.TrimSpace(values[f.Name])
		var err error
		switch {
		case v == "":
			err = parseEmpty(f)
		case failed:
			err = envParse(reflect.New(reflect.TypeOf(dsts[f.root]).Elem()).Interface(), map[string]string{f.Name: v})
		}
		if err == nil {
			err = checkTags(f)
		}
		if err != nil {
			return fmt.Errorf("setting %s=%q: %w", f.Name, values[f.Name], explain(f, err))
		}
	}
	if failed {
		// Not reached: a failing value fails alone as well.
		return errors.New("settings: the parser failed on a value that parses alone")
	}
	return nil
}

// envParse runs the parser over dst with env as the environment and no
// defaults (Load applied them, and an empty value is not a missing one).
func envParse(dst any, values map[string]string) error {
	return env.ParseWithOptions(dst, env.Options{Environment: values, FuncMap: parsers, DefaultValueTagName: "settings-no-default"})
}

// parseEmpty sets f from an empty value as its type's parser reads it.
func parseEmpty(f Field) error {
	if u, ok := f.value.Addr().Interface().(encoding.TextUnmarshaler); ok {
		return u.UnmarshalText(nil)
	}
	p, ok := parsers[f.field.Type]
	if !ok {
		f.value.SetZero() // strings, lists, maps: empty
		return nil
	}
	v, err := p("")
	if err != nil {
		return err
	}
	f.value.Set(reflect.ValueOf(v).Convert(f.field.Type))
	return nil
}

// checkTags applies the checks the field's tags ask for: an integer's
// bounds (min, max), a string's words (oneof:"a b c") or that it is not
// empty (notEmpty:"true").
func checkTags(f Field) error {
	switch {
	case isInteger(f.field.Type):
		lo, hi := bounds(f)
		var n int64
		if f.value.CanInt() {
			n = f.value.Int()
		} else {
			n = int64(f.value.Uint())
		}
		if n < lo || n > hi {
			return errInteger
		}
	case f.field.Type.Kind() != reflect.String:
	case f.field.Tag.Get("notEmpty") == "true" && f.value.String() == "":
		return errors.New("must not be empty")
	case f.field.Tag.Get("oneof") != "":
		words := strings.Fields(f.field.Tag.Get("oneof"))
		for _, w := range words {
			if f.value.String() == w {
				return nil
			}
		}
		return fmt.Errorf("want %s or %s", strings.Join(words[:len(words)-1], ", "), words[len(words)-1])
	}
	return nil
}

// explain unwraps the parser's error, and words an integer's as its
// bounds.
func explain(f Field, err error) error {
	var pe env.ParseError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	var agg env.AggregateError
	if errors.As(err, &agg) && len(agg.Errors) > 0 {
		err = agg.Errors[0]
		if errors.As(err, &pe) {
			err = pe.Err
		}
	}
	if isInteger(f.field.Type) {
		lo, hi := bounds(f)
		return fmt.Errorf("want an integer from %d to %d", lo, hi)
	}
	return err
}

func bounds(f Field) (lo, hi int64) {
	lo, _ = strconv.ParseInt(f.field.Tag.Get("min"), 10, 64)
	hi, _ = strconv.ParseInt(f.field.Tag.Get("max"), 10, 64)
	return lo, hi
}

// isInteger reports whether t is one of the integer types the parsers
// read (int, uint32, uint64): settings with bounds.
func isInteger(t reflect.Type) bool {
	return t == reflect.TypeFor[int]() || t == reflect.TypeFor[uint32]() || t == reflect.TypeFor[uint64]()
}
