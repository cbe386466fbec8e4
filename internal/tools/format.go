package tools

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"unicode/utf8"
)

// Output limits: what one result may carry for a model.
const (
	maxOutputHead = 20 << 10 // bytes kept from the start of a long output
	maxOutputTail = 10 << 10 // and from its end
)

// capture keeps the head and the tail of a stream of bytes, counting the
// total: a command's output of any size costs bounded memory.
type capture struct {
	head  []byte
	tail  []byte // ring of the last maxOutputTail bytes, in order
	total int64
}

func (c *capture) Write(p []byte) (int, error) {
	n := len(p)
	c.total += int64(n)
	if room := maxOutputHead - len(c.head); room > 0 {
		k := min(room, len(p))
		c.head = append(c.head, p[:k]...)
		p = p[k:]
	}
	if len(p) > 0 {
		c.tail = append(c.tail, p...)
		if len(c.tail) > maxOutputTail {
			c.tail = append(c.tail[:0:0], c.tail[len(c.tail)-maxOutputTail:]...)
		}
	}
	return n, nil
}

// truncated reports whether bytes were dropped between head and tail.
func (c *capture) truncated() bool { return c.total > int64(len(c.head)+len(c.tail)) }

// String returns the kept output, with a marker where bytes were left out.
func (c *capture) String() string {
	if !c.truncated() {
		return string(c.head) + string(c.tail)
	}
	omitted := c.total - int64(len(c.head)+len(c.tail))
	return strings.ToValidUTF8(string(c.head), "") +
		fmt.Sprintf("\n\n[... %d bytes omitted ...]\n\n", omitted) +
		strings.ToValidUTF8(string(c.tail), "")
}

// truncateText caps s for a result (head and tail), saying how much went.
func truncateText(s string) (string, bool) {
	var c capture
	_, _ = c.Write([]byte(s))
	return c.String(), c.truncated()
}

// looksBinary reports whether data is not text: a NUL byte or invalid
// UTF-8 in its first 8 KiB (a sequence cut at the end is fine).
func looksBinary(data []byte) bool {
	sample := data
	if len(sample) > 8<<10 {
		sample = sample[:8<<10]
	}
	if bytes.IndexByte(sample, 0) >= 0 {
		return true
	}
	for len(sample) > 0 {
		r, size := utf8.DecodeRune(sample)
		if r == utf8.RuneError && size <= 1 {
			if len(sample) < utf8.UTFMax && len(data) > len(sample) {
				return false // cut in the middle of a character
			}
			if len(sample) < utf8.UTFMax && !utf8.FullRune(sample) {
				return false
			}
			return true
		}
		sample = sample[size:]
	}
	return false
}

// imageType returns the MIME type of an image format a model can view,
// from its magic bytes, or "".
func imageType(data []byte) string {
	switch {
	case bytes.HasPrefix(data, []byte("\x89PNG\r\n\x1a\n")):
		return "image/png"
	case bytes.HasPrefix(data, []byte{0xff, 0xd8, 0xff}):
		return "image/jpeg"
	case bytes.HasPrefix(data, []byte("GIF87a")), bytes.HasPrefix(data, []byte("GIF89a")):
		return "image/gif"
	case len(data) > 12 && string(data[:4]) == "RIFF" && string(data[8:12]) == "WEBP":
		return "image/webp"
	}
	return ""
}

// ansi matches terminal escape sequences: CSI, OSC, and two-byte escapes.
var ansi = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]|\x1b[()][0-9A-Za-z]`)
})

// plainTerminal strips escape sequences and carriage returns from terminal
// output, so a model reads what a person would see.
func plainTerminal(s string) string {
	s = ansi().ReplaceAllString(s, "")
	s = strings.ReplaceAll(s, "\r\n", "\n")
	// A lone \r rewinds the line: keep what was written last.
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if j := strings.LastIndex(l, "\r"); j >= 0 {
			lines[i] = l[j+1:]
		}
	}
	s = strings.Join(lines, "\n")
	return strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' || r >= 0x20 && r != 0x7f {
			return r
		}
		return -1
	}, s)
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
