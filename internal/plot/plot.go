// Package plot draws the few charts seedctl's reports need (learning
// curves with shaded seed bands, success against data share) as PNG,
// with nothing but the standard library and a bitmap font.
package plot

import (
	"io"

	"github.com/seedctl/seedctl/internal/atomicfile"

	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// Series is one line; Lo/Hi (same length as Y), when set, shade a band.
type Series struct {
	Name   string
	X, Y   []float64
	Lo, Hi []float64
}

// Chart is a line chart.
type Chart struct {
	Title, XLabel, YLabel string
	Series                []Series
	// YMin/YMax fix the y range when YMax > YMin; otherwise it fits the data.
	YMin, YMax float64
	// YFromZero fits the y range to the data but starts it at 0 and ends it
	// on a multiple of 10 (success rates of a few percent stay readable).
	YFromZero bool
}

var palette = []color.RGBA{
	{31, 119, 180, 255}, {214, 39, 40, 255}, {44, 160, 44, 255}, {255, 127, 14, 255},
	{148, 103, 189, 255}, {140, 86, 75, 255}, {227, 119, 194, 255}, {127, 127, 127, 255},
}

// PNG renders the chart at w×h pixels into path (atomically).
func (c Chart) PNG(path string, w, h int) error {
	img, err := c.Render(w, h)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.Write(path, func(w io.Writer) error {
		if err := png.Encode(w, img); err != nil {
			return fmt.Errorf("encoding %s: %w", path, err)
		}
		return nil
	})
}

// Render draws the chart.
func (c Chart) Render(w, h int) (*image.RGBA, error) {
	if w < 200 || h < 150 {
		return nil, fmt.Errorf("plot: %dx%d is too small", w, h)
	}
	xmin, xmax, ymin, ymax, err := c.bounds()
	if err != nil {
		return nil, err
	}
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	fill(img, img.Bounds(), color.RGBA{255, 255, 255, 255})
	left, right, top, bottom := 60, w-20, 46, h-45
	px := func(x float64) int { return left + int((x-xmin)/(xmax-xmin)*float64(right-left)+0.5) }
	py := func(y float64) int { return bottom - int((y-ymin)/(ymax-ymin)*float64(bottom-top)+0.5) }
	grey, black := color.RGBA{220, 220, 220, 255}, color.RGBA{0, 0, 0, 255}
	for i := 0; i <= 5; i++ {
		y := ymin + float64(i)/5*(ymax-ymin)
		line(img, left, py(y), right, py(y), grey)
		text(img, 4, py(y)+4, tick(y, (ymax-ymin)/5), black)
	}
	for _, x := range xTicks(c.Series, xmin, xmax) {
		text(img, px(x)-10, bottom+15, trim(x), black)
	}
	line(img, left, bottom, right, bottom, black)
	line(img, left, top, left, bottom, black)
	text(img, left, 16, c.Title, black)
	text(img, (left+right)/2-len(c.XLabel)*3, h-8, c.XLabel, black)
	text(img, 4, top-12, c.YLabel, black)
	// The legend sits in the top right corner, as wide as its longest name
	// (7 px a character in the 7×13 face), never left of the plot area.
	legendX := right - 150
	for _, s := range c.Series {
		legendX = min(legendX, right-18-7*utf8.RuneCountInString(s.Name))
	}
	legendX = max(legendX, left+4)
	for si, s := range c.Series {
		col := palette[si%len(palette)]
		if s.Lo != nil {
			band := color.RGBA{col.R, col.G, col.B, 60}
			for i := 0; i+1 < len(s.X); i++ {
				for x := px(s.X[i]); x <= px(s.X[i+1]); x++ {
					f := 0.0
					if px(s.X[i+1]) > px(s.X[i]) {
						f = float64(x-px(s.X[i])) / float64(px(s.X[i+1])-px(s.X[i]))
					}
					lo := s.Lo[i] + f*(s.Lo[i+1]-s.Lo[i])
					hi := s.Hi[i] + f*(s.Hi[i+1]-s.Hi[i])
					for y := py(hi); y <= py(lo); y++ {
						blend(img, x, y, band)
					}
				}
			}
		}
		for i := 0; i+1 < len(s.X); i++ {
			thick(img, px(s.X[i]), py(s.Y[i]), px(s.X[i+1]), py(s.Y[i+1]), col)
		}
		for i := range s.X {
			fill(img, image.Rect(px(s.X[i])-2, py(s.Y[i])-2, px(s.X[i])+3, py(s.Y[i])+3), col)
		}
		// Legend.
		ly := top + 6 + 14*si
		fill(img, image.Rect(legendX, ly-6, legendX+12, ly+2), col)
		text(img, legendX+18, ly+2, s.Name, black)
	}
	return img, nil
}

// bounds checks the series and gives the axes' ranges: the data's, or
// the fixed or zero-based y range the chart asks for, never empty.
func (c Chart) bounds() (xmin, xmax, ymin, ymax float64, err error) {
	xmin, xmax, ymin, ymax = math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for _, s := range c.Series {
		if len(s.X) != len(s.Y) || (s.Lo != nil && len(s.Lo) != len(s.Y)) || (s.Hi != nil && len(s.Hi) != len(s.Y)) {
			return 0, 0, 0, 0, fmt.Errorf("plot: series %q has %d x, %d y, %d lo, %d hi values", s.Name, len(s.X), len(s.Y), len(s.Lo), len(s.Hi))
		}
		for i := range s.X {
			xmin, xmax = math.Min(xmin, s.X[i]), math.Max(xmax, s.X[i])
			ymin, ymax = math.Min(ymin, s.Y[i]), math.Max(ymax, s.Y[i])
			if s.Lo != nil {
				ymin, ymax = math.Min(ymin, s.Lo[i]), math.Max(ymax, s.Hi[i])
			}
		}
	}
	if math.IsInf(xmin, 1) {
		xmin, xmax, ymin, ymax = 0, 1, 0, 1
	}
	if c.YMax > c.YMin {
		ymin, ymax = c.YMin, c.YMax
	} else if c.YFromZero {
		ymin, ymax = 0, math.Max(10, math.Ceil(ymax/10+0.05)*10)
	}
	if xmax == xmin {
		xmin, xmax = xmin-1, xmax+1
	}
	if ymax == ymin {
		ymin, ymax = ymin-1, ymax+1
	}
	return xmin, xmax, ymin, ymax, nil
}

// xTicks places x labels: on whole numbers when every x is one (iterations,
// percents), at most about ten of them; else at six even steps.
func xTicks(series []Series, xmin, xmax float64) []float64 {
	whole := len(series) > 0
	for _, s := range series {
		for _, x := range s.X {
			whole = whole && x == math.Trunc(x)
		}
	}
	var out []float64
	if !whole {
		for i := 0; i <= 5; i++ {
			out = append(out, xmin+float64(i)/5*(xmax-xmin))
		}
		return out
	}
	step := 1.0 // the smallest of 1, 2, 5, 10, 20, 50, … giving at most ten steps
	for k := 0; (xmax-xmin)/step > 10; k++ {
		step = []float64{2, 5, 10}[k%3] * math.Pow(10, float64(k/3))
	}
	for x := math.Ceil(xmin/step) * step; x <= xmax+1e-9; x += step {
		out = append(out, x)
	}
	return out
}

// tick labels a y tick with the decimals its step needs (0.001 apart
// reads 0.012, 0.013, not 0.01, 0.01).
func tick(v, step float64) string {
	d := 0
	if step > 0 && step < 1 {
		d = min(6, int(math.Ceil(-math.Log10(step)-1e-9)))
		if math.Abs(step*math.Pow(10, float64(d))-math.Round(step*math.Pow(10, float64(d)))) > 1e-6 {
			d = min(6, d+1)
		}
	}
	out := strconv.FormatFloat(v, 'f', d, 64)
	if strings.Trim(out, "-0.") == "" {
		return strings.TrimPrefix(out, "-") // no "-0.000" from rounding
	}
	return out
}

// niceStep rounds a tick step up to 1, 2, 2.5 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 || math.IsInf(raw, 0) || math.IsNaN(raw) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= raw*(1-1e-12) {
			return m * p
		}
	}
	return 10 * p
}

func trim(v float64) string {
	if math.Abs(v) >= 100 || v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func fill(img *image.RGBA, r image.Rectangle, c color.RGBA) {
	r = r.Intersect(img.Bounds())
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			img.SetRGBA(x, y, c)
		}
	}
}

func blend(img *image.RGBA, x, y int, c color.RGBA) {
	if !image.Pt(x, y).In(img.Bounds()) {
		return
	}
	o := img.RGBAAt(x, y)
	a := float64(c.A) / 255
	mix := func(a0, b0 uint8) uint8 { return uint8(float64(a0)*(1-a) + float64(b0)*a) }
	img.SetRGBA(x, y, color.RGBA{mix(o.R, c.R), mix(o.G, c.G), mix(o.B, c.B), 255})
}

// line is Bresenham's.
func line(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	e := dx + dy
	for {
		if image.Pt(x0, y0).In(img.Bounds()) {
			img.SetRGBA(x0, y0, c)
		}
		if x0 == x1 && y0 == y1 {
			return
		}
		e2 := 2 * e
		if e2 >= dy {
			e += dy
			x0 += sx
		}
		if e2 <= dx {
			e += dx
			y0 += sy
		}
	}
}

func thick(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA) {
	line(img, x0, y0, x1, y1, c)
	line(img, x0, y0+1, x1, y1+1, c)
	line(img, x0+1, y0, x1+1, y1, c)
}

func text(img *image.RGBA, x, y int, s string, c color.RGBA) {
	d := font.Drawer{Dst: img, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

func sign(v int) int {
	switch {
	case v < 0:
		return -1
	case v > 0:
		return 1
	}
	return 0
}
