// Package chart draws the benchmark figures (bars and curves) as PNG images
// with the standard library only: a 5×7 bitmap font, axes, a legend.
package chart

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"strings"
	"unicode"
)

// Series is one named set of values, one per category (bars) or per x
// (lines).
type Series struct {
	Name   string
	Values []float64
}

// Chart is a figure: grouped bars over Categories, or lines over X.
type Chart struct {
	Title      string
	YLabel     string
	Categories []string  // bars: one group per category
	X          []float64 // lines: x values (drawn on a log2 axis when LogX)
	LogX       bool
	Series     []Series
}

var palette = []color.RGBA{{31, 119, 180, 255}, {255, 127, 14, 255}, {44, 160, 44, 255}, {214, 39, 40, 255}, {148, 103, 189, 255}, {140, 86, 75, 255}, {227, 119, 194, 255}, {127, 127, 127, 255}}

const (
	width, height = 900, 520
	left, right   = 90, 20
	top, bottom   = 50, 90
	scale         = 2 // font pixels per bitmap pixel
)

type canvas struct{ *image.RGBA }

func (c canvas) rect(x0, y0, x1, y1 int, col color.RGBA) {
	for y := max(y0, 0); y < min(y1, height); y++ {
		for x := max(x0, 0); x < min(x1, width); x++ {
			c.SetRGBA(x, y, col)
		}
	}
}

func (c canvas) line(x0, y0, x1, y1 int, col color.RGBA) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	e := dx + dy
	for {
		c.rect(x0-1, y0-1, x0+1, y0+1, col)
		if x0 == x1 && y0 == y1 {
			return
		}
		if e2 := 2 * e; e2 >= dy {
			e += dy
			x0 += sx
		} else {
			e += dx
			y0 += sy
		}
	}
}

// text draws s with its top-left corner at (x, y); returns its width.
func (c canvas) text(x, y int, s string, col color.RGBA) int {
	cx := x
	for _, r := range strings.ToLower(s) {
		g, ok := glyphs[r]
		if !ok {
			g = glyphs['?']
			if unicode.IsSpace(r) {
				g = glyphs[' ']
			}
		}
		for gy, row := range g {
			for gx, p := range row {
				if p == '#' {
					c.rect(cx+gx*scale, y+gy*scale, cx+(gx+1)*scale, y+(gy+1)*scale, col)
				}
			}
		}
		cx += 6 * scale
	}
	return cx - x
}

func textWidth(s string) int { return len([]rune(s)) * 6 * scale }

func abs(x int) int { return max(x, -x) }
func sign(x int) int {
	switch {
	case x > 0:
		return 1
	case x < 0:
		return -1
	}
	return 0
}

// niceMax rounds v up to 1, 2 or 5 times a power of ten.
func niceMax(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// Format writes a value compactly: 1.2m, 35k, 870, 3.4.
func Format(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1e9:
		return fmt.Sprintf("%.3gg", v/1e9)
	case a >= 1e6:
		return fmt.Sprintf("%.3gm", v/1e6)
	case a >= 1e3:
		return fmt.Sprintf("%.3gk", v/1e3)
	}
	return fmt.Sprintf("%.3g", v)
}

// WritePNG draws the chart and encodes it as PNG.
func (ch *Chart) WritePNG(w io.Writer) error {
	if len(ch.Series) == 0 {
		return fmt.Errorf("chart %q: no series", ch.Title)
	}
	c := canvas{image.NewRGBA(image.Rect(0, 0, width, height))}
	c.rect(0, 0, width, height, color.RGBA{255, 255, 255, 255})
	black, grey := color.RGBA{0, 0, 0, 255}, color.RGBA{225, 225, 225, 255}
	c.text((width-textWidth(ch.Title))/2, 6, ch.Title, black)
	ymax := 0.0
	for _, s := range ch.Series {
		for _, v := range s.Values {
			ymax = max(ymax, v)
		}
	}
	ymax = niceMax(ymax)
	pw, ph := width-left-right, height-top-bottom
	ypix := func(v float64) int { return top + ph - int(v/ymax*float64(ph)) }
	for i := 0; i <= 5; i++ {
		v := ymax * float64(i) / 5
		y := ypix(v)
		c.rect(left, y, left+pw, y+1, grey)
		lbl := Format(v)
		c.text(left-8-textWidth(lbl), y-7, lbl, black)
	}
	c.rect(left, top, left+1, top+ph, black)
	c.rect(left, top+ph, left+pw, top+ph+1, black)
	c.text(8, top-22, ch.YLabel, black)
	if len(ch.Categories) > 0 {
		groups := len(ch.Categories)
		gw := pw / groups
		bw := max((gw-20)/len(ch.Series), 2)
		for g, cat := range ch.Categories {
			gx := left + g*gw + 10
			for si, s := range ch.Series {
				if g < len(s.Values) {
					x := gx + si*bw
					c.rect(x, ypix(s.Values[g]), x+bw-2, top+ph, palette[si%len(palette)])
				}
			}
			c.text(left+g*gw+(gw-textWidth(cat))/2, top+ph+8, cat, black)
		}
	} else {
		xv := func(x float64) float64 {
			if ch.LogX {
				return math.Log2(x)
			}
			return x
		}
		x0, x1 := xv(ch.X[0]), xv(ch.X[len(ch.X)-1])
		xpix := func(x float64) int { return left + 10 + int((xv(x)-x0)/math.Max(x1-x0, 1e-9)*float64(pw-20)) }
		for _, x := range ch.X {
			lbl := Format(x)
			c.text(xpix(x)-textWidth(lbl)/2, top+ph+8, lbl, black)
		}
		for si, s := range ch.Series {
			col := palette[si%len(palette)]
			for i := 1; i < len(s.Values) && i < len(ch.X); i++ {
				c.line(xpix(ch.X[i-1]), ypix(s.Values[i-1]), xpix(ch.X[i]), ypix(s.Values[i]), col)
			}
			for i := 0; i < len(s.Values) && i < len(ch.X); i++ {
				c.rect(xpix(ch.X[i])-4, ypix(s.Values[i])-4, xpix(ch.X[i])+4, ypix(s.Values[i])+4, col)
			}
		}
	}
	lx := left
	for si, s := range ch.Series {
		c.rect(lx, height-30, lx+14, height-16, palette[si%len(palette)])
		lx += 20 + c.text(lx+20, height-30, s.Name, black) + 20
	}
	return png.Encode(w, c.RGBA)
}
