package plot

import (
	"image/png"
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
