package plot

import (
	"image/png"
	"math"
	"os"
	"path/filepath"
	"testing"
)

func TestChartDrawsSeriesAndBands(t *testing.T) {
	c := Chart{Title: "t", XLabel: "x", YLabel: "y", Series: []Series{
		{Name: "a", X: []float64{0, 1, 2}, Y: []float64{0, 50, 100}, Lo: []float64{0, 40, 90}, Hi: []float64{10, 60, 100}},
		{Name: "b", X: []float64{0, 2}, Y: []float64{100, 0}},
	}}
	p := filepath.Join(t.TempDir(), "c.png")
	if err := c.PNG(p, 400, 300); err != nil {
		t.Fatal(err)
	}
	f, _ := os.Open(p)
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	// Series colours must appear (the first line and the second).
	found := map[[3]uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			found[[3]uint32{r >> 8, g >> 8, bl >> 8}] = true
		}
	}
	for i := 0; i < 2; i++ {
		c := palette[i]
		if !found[[3]uint32{uint32(c.R), uint32(c.G), uint32(c.B)}] {
			t.Errorf("series %d colour not drawn", i)
		}
	}
	if _, err := (Chart{Series: []Series{{X: []float64{1}, Y: nil}}}).Render(400, 300); err == nil {
		t.Error("mismatched series accepted")
	}
}

func TestXTicksOnWholeNumbers(t *testing.T) {
	cases := []struct {
		name       string
		xs         []float64
		xmin, xmax float64
		want       []float64
	}{
		{"iterations", []float64{1, 2, 3, 4}, 1, 4, []float64{1, 2, 3, 4}},
		{"percents", []float64{20, 40, 100}, 20, 100, []float64{20, 30, 40, 50, 60, 70, 80, 90, 100}},
		{"long run", []float64{1, 60}, 1, 60, []float64{10, 20, 30, 40, 50, 60}},
		{"fractions", []float64{0, 0.5}, 0, 0.5, []float64{0, 0.1, 0.2, 0.3, 0.4, 0.5}},
	}
	for _, c := range cases {
		got := xTicks([]Series{{X: c.xs, Y: c.xs}}, c.xmin, c.xmax)
		if len(got) != len(c.want) {
			t.Errorf("%s: ticks %v, want %v", c.name, got, c.want)
			continue
		}
		for i := range got {
			if math.Abs(got[i]-c.want[i]) > 1e-9 {
				t.Errorf("%s: ticks %v, want %v", c.name, got, c.want)
				break
			}
		}
	}
}
