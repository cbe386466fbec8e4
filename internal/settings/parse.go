package settings

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"
)

// parsers are agentbox's parsers for the standard types settings have:
// every duration is seconds, every boolean pydantic's, every int64 a
// size; integers are checked against their field's bounds after parsing.
var parsers = map[reflect.Type]env.ParserFunc{
	reflect.TypeFor[bool]():          func(v string) (any, error) { return ParseBool(v) },
	reflect.TypeFor[time.Duration](): func(v string) (any, error) { return ParseSeconds(v) },
	reflect.TypeFor[int64]():         func(v string) (any, error) { return ParseSize(v) },
	reflect.TypeFor[int]():           func(v string) (any, error) { n, err := parseInteger(v, math.MinInt, math.MaxInt); return int(n), err },
	reflect.TypeFor[uint32]():        func(v string) (any, error) { n, err := parseInteger(v, 0, math.MaxUint32); return uint32(n), err },
	reflect.TypeFor[uint64]():        func(v string) (any, error) { n, err := parseInteger(v, 0, math.MaxInt); return uint64(n), err },
}

// errInteger is an integer setting's failure; Load words it with the
// setting's bounds.
var errInteger = errors.New("want an integer")

// parseInteger reads a decimal integer that its type holds (its setting's
// bounds are checked after).
func parseInteger(v string, lo, hi int64) (int64, error) {
	n, err := strconv.Atoi(v)
	if err != nil || int64(n) < lo || int64(n) > hi {
		return 0, errInteger
	}
	return int64(n), nil
}

// ParseBool reads a boolean setting in pydantic's spellings, which
// agentscope's .env files use (true/false, 1/0, yes/no, on/off, t/f, y/n;
// empty is false).
func ParseBool(v string) (bool, error) {
	switch strings.ToLower(v) {
	case "1", "true", "yes", "on", "t", "y":
		return true, nil
	case "0", "false", "no", "off", "f", "n", "":
		return false, nil
	}
	return false, fmt.Errorf("want true or false")
}

// ParseSeconds reads a duration setting: a number of seconds >= 0.
func ParseSeconds(v string) (time.Duration, error) {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 0 {
		return 0, fmt.Errorf("want a number of seconds >= 0")
	}
	return time.Duration(f * float64(time.Second)), nil
}

// ParseSize parses a byte size such as 512M, 1G, 1.5GiB or 1048576.
func ParseSize(v string) (int64, error) {
	s := strings.ToUpper(strings.TrimSpace(v))
	s = strings.TrimSuffix(strings.TrimSuffix(s, "IB"), "B")
	mult := int64(1)
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 'K':
			mult, s = 1<<10, s[:n-1]
		case 'M':
			mult, s = 1<<20, s[:n-1]
		case 'G':
			mult, s = 1<<30, s[:n-1]
		case 'T':
			mult, s = 1<<40, s[:n-1]
		}
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	// !(f > 0) also refuses NaN; sizes must fit an int64 and be at least
	// a byte (converting NaN, Inf or 1e30 to int64 gives garbage, often a
	// negative size: found by FuzzParseSize).
	if err != nil || !(f > 0) {
		return 0, fmt.Errorf("want a size such as 512M or 2G, got %q", v)
	}
	b := f * float64(mult)
	if b < 1 || b >= math.MaxInt64 {
		return 0, fmt.Errorf("size %q is out of range (1 byte to 8 EiB)", v)
	}
	return int64(b), nil
}

// SizeOrZero is a size setting where 0 means none (no limit, no
// reserve).
type SizeOrZero int64

// UnmarshalText reads 0 or a size (ParseSize).
func (s *SizeOrZero) UnmarshalText(b []byte) error {
	if strings.TrimSpace(string(b)) == "0" {
		*s = 0
		return nil
	}
	n, err := ParseSize(string(b))
	*s = SizeOrZero(n)
	return err
}

// List is a comma-separated setting: its items trimmed, empty ones left
// out.
type List []string

// UnmarshalText splits b at commas (SplitList).
func (l *List) UnmarshalText(b []byte) error {
	*l = SplitList(string(b))
	return nil
}

// SplitList splits v at commas, trimming each item and leaving out empty
// ones.
func SplitList(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// AbsPath is a setting naming an absolute path, or nothing ("").
type AbsPath string

// UnmarshalText checks the path is absolute.
func (p *AbsPath) UnmarshalText(b []byte) error {
	if v := string(b); v != "" && !filepath.IsAbs(v) {
		return fmt.Errorf("want an absolute path")
	}
	*p = AbsPath(b)
	return nil
}
