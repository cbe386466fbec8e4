// Package units renders quantities for people: byte sizes in messages,
// logs and CLI tables.
package units

import "fmt"

// FormatBytes renders n with binary units and one decimal past bytes, so
// that columns of sizes line up: "512 B", "1.5 KiB", "2.0 GiB".
func FormatBytes(n int64) string {
	const unit = 1024
	if n < unit && n > -unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; (m >= unit || m <= -unit) && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
