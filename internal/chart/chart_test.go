package chart

import (
	"bytes"
	"image/png"
	"testing"
)

func TestBarsAndLines(t *testing.T) {
	for _, ch := range []*Chart{
		{Title: "Table 2", YLabel: "calls/s", Categories: []string{"8", "64", "256"}, Series: []Series{{"raw", []float64{6e6, 5e6, 4e6}}, {"trad", []float64{2e7, 8e6, 3e6}}}},
		{Title: "Fig. 2", YLabel: "calls/s", X: []float64{8, 64, 4096}, LogX: true, Series: []Series{{"shm", []float64{6e6, 5e6, 1e6}}}},
	} {
		var b bytes.Buffer
		if err := ch.WritePNG(&b); err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(&b)
		if err != nil {
			t.Fatal(err)
		}
		if img.Bounds().Dx() != width || img.Bounds().Dy() != height {
			t.Fatalf("size %v", img.Bounds())
		}
		// Some pixel of the first series' colour was drawn.
		found := false
		for y := 0; y < height && !found; y += 2 {
			for x := 0; x < width; x += 2 {
				r, g, b, _ := img.At(x, y).RGBA()
				if r>>8 == 31 && g>>8 == 119 && b>>8 == 180 {
					found = true
					break
				}
			}
		}
		if !found {
			t.Errorf("%s: the first series was not drawn", ch.Title)
		}
	}
	if err := (&Chart{Title: "empty"}).WritePNG(&bytes.Buffer{}); err == nil {
		t.Error("a chart without series was drawn")
	}
}

func TestFormatAndFont(t *testing.T) {
	for v, want := range map[float64]string{1.5e6: "1.5m", 35000: "35k", 870: "870", 3.4: "3.4", 2e9: "2g"} {
		if got := Format(v); got != want {
			t.Errorf("Format(%v) = %q, want %q", v, got, want)
		}
	}
	for r, g := range glyphs {
		for _, row := range g {
			if len(row) != 5 {
				t.Errorf("glyph %q has a row of %d columns", r, len(row))
			}
		}
	}
	if niceMax(730) != 1000 || niceMax(120) != 200 || niceMax(0.3) != 0.5 {
		t.Errorf("niceMax: %v %v %v", niceMax(730), niceMax(120), niceMax(0.3))
	}
}
