package plot

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// The SVG renderings are for HTML reports: the same axes, ticks, legend
// and colours as the PNG ones, vector text, and every point or bar
// carrying a <title> with its value (shown on hover). Names and titles are
// escaped; the output can be placed in a page as is.

func hexColor(i int) string {
	c := palette[i%len(palette)]
	return fmt.Sprintf("#%02x%02x%02x", c.R, c.G, c.B)
}

// svgFrame writes the opening tag, grid, ticks, axes and labels, and
// returns the pixel mappings.
func svgFrame(b *strings.Builder, w, h int, title, xlabel, ylabel string, xticks []float64, xmin, xmax, ymin, ymax float64) (px, py func(float64) float64, left, right, top float64) {
	left, right, top, bottom := 60.0, float64(w-20), 46.0, float64(h-45)
	px = func(x float64) float64 { return left + (x-xmin)/(xmax-xmin)*(right-left) }
	py = func(y float64) float64 { return bottom - (y-ymin)/(ymax-ymin)*(bottom-top) }
	fmt.Fprintf(b, `<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="%s">`, w, h, w, h, html.EscapeString(title))
	fmt.Fprintf(b, `<rect width="%d" height="%d" fill="#fff"/>`, w, h)
	b.WriteString(`<g font-family="sans-serif" font-size="11">`)
	for i := 0; i <= 5; i++ {
		y := ymin + float64(i)/5*(ymax-ymin)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`, left, py(y), right, py(y))
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`, left-6, py(y)+4, tick(y, (ymax-ymin)/5))
	}
	for _, x := range xticks {
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`, px(x), bottom+16, trim(x))
	}
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#000"/>`, left, bottom, right, bottom)
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#000"/>`, left, top, left, bottom)
	fmt.Fprintf(b, `<text x="%.1f" y="18" font-size="13" font-weight="bold">%s</text>`, left, html.EscapeString(title))
	fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`, (left+right)/2, h-8, html.EscapeString(xlabel))
	fmt.Fprintf(b, `<text x="4" y="%.1f">%s</text>`, top-12, html.EscapeString(ylabel))
	return px, py, left, right, top
}

func svgLegend(b *strings.Builder, names []string, left, right, top float64) {
	lx := right - 150
	for _, n := range names {
		lx = math.Min(lx, right-18-6.5*float64(len([]rune(n))))
	}
	lx = math.Max(lx, left+4)
	for i, n := range names {
		ly := top + 6 + 14*float64(i)
		fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="12" height="8" fill="%s"/>`, lx, ly-6, hexColor(i))
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f">%s</text>`, lx+18, ly+2, html.EscapeString(n))
	}
}

// SVG renders the chart as an <svg> element of w×h units.
func (c Chart) SVG(w, h int) (string, error) {
	if w < 200 || h < 150 {
		return "", fmt.Errorf("plot: %dx%d is too small", w, h)
	}
	xmin, xmax, ymin, ymax, err := c.bounds()
	if err != nil {
		return "", err
	}
	var b strings.Builder
	px, py, left, right, top := svgFrame(&b, w, h, c.Title, c.XLabel, c.YLabel, xTicks(c.Series, xmin, xmax), xmin, xmax, ymin, ymax)
	names := make([]string, len(c.Series))
	for si, s := range c.Series {
		names[si] = s.Name
		col := hexColor(si)
		if s.Lo != nil && len(s.X) > 0 {
			var pts []string
			for i := range s.X {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(s.X[i]), py(s.Hi[i])))
			}
			for i := len(s.X) - 1; i >= 0; i-- {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(s.X[i]), py(s.Lo[i])))
			}
			fmt.Fprintf(&b, `<polygon class="band" points="%s" fill="%s" fill-opacity="0.25"/>`, strings.Join(pts, " "), col)
		}
		if len(s.X) > 1 {
			pts := make([]string, len(s.X))
			for i := range s.X {
				pts[i] = fmt.Sprintf("%.1f,%.1f", px(s.X[i]), py(s.Y[i]))
			}
			fmt.Fprintf(&b, `<polyline class="series" points="%s" fill="none" stroke="%s" stroke-width="2"/>`, strings.Join(pts, " "), col)
		}
		for i := range s.X {
			fmt.Fprintf(&b, `<circle class="point" cx="%.1f" cy="%.1f" r="3" fill="%s"><title>%s: %s at %s</title></circle>`,
				px(s.X[i]), py(s.Y[i]), col, html.EscapeString(s.Name), value(s.Y[i]), trim(s.X[i]))
		}
	}
	svgLegend(&b, names, left, right, top)
	b.WriteString(`</g></svg>`)
	return b.String(), nil
}

// value prints a point's value with enough digits for a tooltip.
func value(v float64) string {
	if math.Abs(v) >= 100 || v == math.Trunc(v) {
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.4g", v)
}

// Stack is one layer of a stacked bar chart: a value per bar.
type Stack struct {
	Name   string
	Values []float64
}

// StackedBars is a bar chart whose bars are sums of layers (e.g. the time
// of each phase of an iteration).
type StackedBars struct {
	Title, XLabel, YLabel string
	X                     []float64 // one bar per x
	Stacks                []Stack
}

// SVG renders the bars as an <svg> element of w×h units. Negative values
// are refused: a stack of them has no meaning.
func (c StackedBars) SVG(w, h int) (string, error) {
	if w < 200 || h < 150 {
		return "", fmt.Errorf("plot: %dx%d is too small", w, h)
	}
	ymax := 0.0
	for i := range c.X {
		sum := 0.0
		for _, s := range c.Stacks {
			if len(s.Values) != len(c.X) {
				return "", fmt.Errorf("plot: stack %q has %d values for %d bars", s.Name, len(s.Values), len(c.X))
			}
			if s.Values[i] < 0 || math.IsNaN(s.Values[i]) {
				return "", fmt.Errorf("plot: stack %q: value %v at bar %d", s.Name, s.Values[i], i)
			}
			sum += s.Values[i]
		}
		ymax = math.Max(ymax, sum)
	}
	// The axis ends on a round number (a multiple of 1, 2, 2.5 or 5 ×
	// 10^k) just above the tallest bar.
	unit := niceStep(ymax / 10)
	ymax = math.Ceil(ymax/unit+1e-9) * unit
	xmin, xmax := 0.0, 1.0
	if len(c.X) > 0 {
		xmin, xmax = c.X[0]-0.5, c.X[len(c.X)-1]+0.5
	}
	var b strings.Builder
	series := []Series{{X: c.X, Y: c.X}}
	px, py, left, right, top := svgFrame(&b, w, h, c.Title, c.XLabel, c.YLabel, xTicks(series, xmin+0.5, xmax-0.5), xmin, xmax, 0, ymax)
	bw := 0.7 * (px(1) - px(0))
	if len(c.X) > 1 {
		gap := math.Inf(1)
		for i := 1; i < len(c.X); i++ {
			gap = math.Min(gap, c.X[i]-c.X[i-1])
		}
		bw = 0.7 * (px(gap) - px(0))
	}
	names := make([]string, len(c.Stacks))
	for i, x := range c.X {
		base := 0.0
		for si, s := range c.Stacks {
			v := s.Values[i]
			fmt.Fprintf(&b, `<rect class="bar" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s: %s at %s</title></rect>`,
				px(x)-bw/2, py(base+v), bw, py(base)-py(base+v), hexColor(si), html.EscapeString(s.Name), value(v), trim(x))
			base += v
		}
	}
	for si, s := range c.Stacks {
		names[si] = s.Name
	}
	svgLegend(&b, names, left, right, top)
	b.WriteString(`</g></svg>`)
	return b.String(), nil
}
