package client

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ParseSize parses a size such as "512M", "1.5G", "64KiB" or "1048576"
// into bytes. Units are binary (K = 1024) and case-insensitive; a trailing
// "B" or "iB" is allowed. The API accepts such strings too, but the SDK
// always sends integers.
func ParseSize(s string) (int64, error) {
	v := strings.ToUpper(strings.TrimSpace(s))
	v = strings.TrimSuffix(strings.TrimSuffix(v, "IB"), "B")
	mult := float64(1)
	if n := len(v); n > 0 {
		if i := strings.IndexByte("KMGT", v[n-1]); i >= 0 {
			mult = math.Pow(1024, float64(i+1))
			v = v[:n-1]
		}
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || f <= 0 || math.IsInf(f, 0) || f*mult >= math.MaxInt64 {
		return 0, fmt.Errorf("want a size such as 512M or 2G, got %q", s)
	}
	return int64(f * mult), nil
}
