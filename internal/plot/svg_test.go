package plot

import (
	"encoding/xml"
	"io"
	"math"
	"strconv"
	"strings"
	"testing"
)

// svgElements parses s as XML (it must be well formed) and returns its
// elements in document order with their attributes and character data.
type svgElement struct {
	name  string
	attrs map[string]string
	text  string
}

func parseSVG(t *testing.T, s string) []svgElement {
	t.Helper()
	dec := xml.NewDecoder(strings.NewReader(s))
	var out []svgElement
	var stack []int
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, s)
		}
		switch v := tok.(type) {
		case xml.StartElement:
			e := svgElement{name: v.Name.Local, attrs: map[string]string{}}
			for _, a := range v.Attr {
				e.attrs[a.Name.Local] = a.Value
			}
			out = append(out, e)
			stack = append(stack, len(out)-1)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if len(stack) > 0 {
				out[stack[len(stack)-1]].text += string(v)
			}
		}
	}
	return out
}

func TestChartSVG(t *testing.T) {
	c := Chart{Title: `success <script>alert(1)</script> & more`, XLabel: "iteration", YLabel: "%", YFromZero: true,
		Series: []Series{
			{Name: "train", X: []float64{1, 2, 3}, Y: []float64{10, 20, 30}},
			{Name: `eval "seen"`, X: []float64{0, 3}, Y: []float64{5, 40}, Lo: []float64{1, 35}, Hi: []float64{9, 45}},
		}}
	s, err := c.SVG(640, 360)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(s, "<script>") {
		t.Fatal("the title's markup reached the SVG unescaped")
	}
	els := parseSVG(t, s)
	var points, lines, bands int
	var titles []string
	for _, e := range els {
		switch {
		case e.name == "circle" && e.attrs["class"] == "point":
			points++
		case e.name == "polyline":
			lines++
		case e.name == "polygon":
			bands++
		case e.name == "title":
			titles = append(titles, e.text)
		}
	}
	if points != 5 || lines != 2 || bands != 1 {
		t.Errorf("%d points, %d lines, %d bands; want 5, 2, 1", points, lines, bands)
	}
	if len(titles) != 5 || titles[2] != "train: 30.0 at 3" || titles[4] != `eval "seen": 40.0 at 3` {
		t.Errorf("tooltips %q", titles)
	}
	// The y axis starts at 0 and ends at 50 (YFromZero rounds 45 up), so
	// the point at 40 sits 4/5 of the way up the plot area (46..315).
	last := els[0]
	for _, e := range els {
		if e.name == "circle" {
			last = e
		}
	}
	cy, _ := strconv.ParseFloat(last.attrs["cy"], 64)
	if want := 315 - 0.8*(315-46); math.Abs(cy-want) > 0.1 {
		t.Errorf("the point at 40 is drawn at y %v, want %v", cy, want)
	}
	if _, err := (Chart{Series: []Series{{X: []float64{1}, Y: nil}}}).SVG(640, 360); err == nil {
		t.Error("a series with 1 x and no y was drawn")
	}
}

func TestStackedBarsSVG(t *testing.T) {
	c := StackedBars{Title: "time per phase", XLabel: "iteration", YLabel: "s", X: []float64{1, 2},
		Stacks: []Stack{{Name: "rollout", Values: []float64{30, 10}}, {Name: "update", Values: []float64{10, 10}}}}
	s, err := c.SVG(640, 360)
	if err != nil {
		t.Fatal(err)
	}
	var heights []float64
	for _, e := range parseSVG(t, s) {
		if e.name == "rect" && e.attrs["class"] == "bar" {
			h, _ := strconv.ParseFloat(e.attrs["height"], 64)
			heights = append(heights, h)
		}
	}
	// Four bars' layers in bar order; heights in proportion to the values.
	if len(heights) != 4 || math.Abs(heights[0]/heights[1]-3) > 0.02 || math.Abs(heights[2]-heights[3]) > 0.02 || math.Abs(heights[0]/heights[2]-3) > 0.02 {
		t.Errorf("bar heights %v, want in proportion 30:10:10:10", heights)
	}
	for _, bad := range []StackedBars{
		{X: []float64{1, 2}, Stacks: []Stack{{Name: "a", Values: []float64{1}}}},
		{X: []float64{1}, Stacks: []Stack{{Name: "a", Values: []float64{-1}}}},
		{X: []float64{1}, Stacks: []Stack{{Name: "a", Values: []float64{math.NaN()}}}},
	} {
		if _, err := bad.SVG(640, 360); err == nil {
			t.Errorf("drew %+v", bad)
		}
	}
}

func TestTickLabels(t *testing.T) {
	for _, c := range []struct {
		v, step float64
		want    string
	}{
		{0.012, 0.001, "0.012"}, {-1e-18, 0.002, "0.000"}, {0.25, 0.05, "0.25"}, {0.125, 0.025, "0.125"},
		{40, 10, "40"}, {-0.00001, 0.0028, "0.0000"}, {54, 54, "54"}, {1.5, 0.5, "1.5"}, {0.3, 0.06, "0.30"},
	} {
		if got := tick(c.v, c.step); got != c.want {
			t.Errorf("tick(%v, %v) = %q, want %q", c.v, c.step, got, c.want)
		}
	}
	for _, c := range [][2]float64{{54, 100}, {0.3, 0.5}, {0.0021, 0.0025}, {1, 1}, {11, 20}, {2.2, 2.5}} {
		if got := niceStep(c[0]); math.Abs(got-c[1]) > 1e-12 {
			t.Errorf("niceStep(%v) = %v, want %v", c[0], got, c[1])
		}
	}
}
