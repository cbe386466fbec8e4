package loadtest

import (
	"fmt"
	"html"
	"io"
	"strings"
)

// Series is one curve of a chart: Y over X (seconds since the start).
type Series struct {
	Name   string
	Unit   string
	Color  string
	Points [][2]float64
}

// WriteSVG draws each series in a panel of its own (they have different
// units), one above the other, with vertical lines at markers (daemon
// restarts, in seconds). Plain SVG 1.1, no script, no dependency: any
// browser shows it.
func WriteSVG(w io.Writer, title string, series []Series, markers []float64) error {
	const (
		width   = 900
		panelH  = 220
		left    = 70
		right   = 20
		top     = 40
		gap     = 50
		plotW   = width - left - right
		tickLen = 4
	)
	height := top + len(series)*(panelH+gap)
	var maxX float64
	for _, s := range series {
		for _, p := range s.Points {
			maxX = max(maxX, p[0])
		}
	}
	if maxX <= 0 {
		maxX = 1
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="15">%s</text>`+"\n", left, html.EscapeString(title))
	for i, s := range series {
		y0 := top + i*(panelH+gap)
		var maxY float64
		for _, p := range s.Points {
			maxY = max(maxY, p[1])
		}
		maxY = niceCeil(maxY)
		sx := func(x float64) float64 { return left + x/maxX*plotW }
		sy := func(y float64) float64 { return float64(y0+panelH) - y/maxY*panelH }
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>`+"\n", left, y0, plotW, panelH)
		for k := 0; k <= 4; k++ {
			v := maxY * float64(k) / 4
			y := sy(v)
			fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eee"/>`+"\n", left, y, left+plotW, y)
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", left-tickLen-2, y+4, trimFloat(v))
		}
		for k := 0; k <= 6; k++ {
			x := maxX * float64(k) / 6
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%.0fs</text>`+"\n", sx(x), y0+panelH+15, x)
		}
		for _, m := range markers {
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#c66" stroke-dasharray="4,3"/>`+"\n", sx(m), y0, sx(m), y0+panelH)
		}
		if len(s.Points) > 0 {
			pts := make([]string, len(s.Points))
			for j, p := range s.Points {
				pts[j] = fmt.Sprintf("%.1f,%.1f", sx(p[0]), sy(p[1]))
			}
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`+"\n", html.EscapeString(s.Color), strings.Join(pts, " "))
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d" fill="%s">%s (%s)</text>`+"\n", left+6, y0+15, html.EscapeString(s.Color), html.EscapeString(s.Name), html.EscapeString(s.Unit))
	}
	if len(markers) > 0 {
		fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#c66">dashed: daemon restarts</text>`+"\n", width-right-150, 22)
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten (axis tops).
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := 1.0
	for p*10 <= v {
		p *= 10
	}
	for p > v {
		p /= 10
	}
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func trimFloat(v float64) string {
	s := fmt.Sprintf("%.1f", v)
	return strings.TrimSuffix(s, ".0")
}
