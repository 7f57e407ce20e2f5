package main

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"os"

	"golang.org/x/image/font"
	"golang.org/x/image/font/gofont/gobold"
	"golang.org/x/image/font/gofont/goregular"
	"golang.org/x/image/font/opentype"
	"golang.org/x/image/math/fixed"
)

// bar is one bar of a chart; a second value (Hi) draws a lighter extension, e.g. p95 over
// the median.
type bar struct {
	Label string
	Value float64
	Hi    float64 // 0: none
	Color color.RGBA
}

// panel is one horizontal bar chart.
type panel struct {
	Title  string
	Unit   string
	Bars   []bar
	Target float64 // a dashed vertical line, 0: none
	TLabel string
}

var (
	colLimit   = color.RGBA{0x9e, 0x9e, 0x9e, 0xff}
	colOld     = color.RGBA{0xd9, 0x82, 0x2b, 0xff}
	colProduct = color.RGBA{0x2b, 0x6c, 0xb0, 0xff}
	colDrain   = color.RGBA{0x4c, 0x9a, 0x6a, 0xff}
	colText    = color.RGBA{0x22, 0x22, 0x22, 0xff}
	colGrid    = color.RGBA{0xe4, 0xe4, 0xe4, 0xff}
	colTarget  = color.RGBA{0xc0, 0x39, 0x2b, 0xff}
)

type canvas struct {
	img           *image.RGBA
	regular, bold font.Face
	small         font.Face
}

func newFace(ttf []byte, size float64) (font.Face, error) {
	f, err := opentype.Parse(ttf)
	if err != nil {
		return nil, err
	}
	return opentype.NewFace(f, &opentype.FaceOptions{Size: size, DPI: 72, Hinting: font.HintingFull})
}

// drawChart writes a PNG with the panels stacked, each bar labelled with its value.
func drawChart(path, title, subtitle string, panels []panel) error {
	const width, barH, gap, left, right, top = 1100, 26, 8, 300, 130, 70
	height := top + 20
	for _, p := range panels {
		height += 60 + len(p.Bars)*(barH+gap) + 30
	}
	c := &canvas{img: image.NewRGBA(image.Rect(0, 0, width, height))}
	var err error
	if c.regular, err = newFace(goregular.TTF, 15); err != nil {
		return err
	}
	if c.bold, err = newFace(gobold.TTF, 18); err != nil {
		return err
	}
	if c.small, err = newFace(goregular.TTF, 13); err != nil {
		return err
	}
	draw.Draw(c.img, c.img.Bounds(), image.White, image.Point{}, draw.Src)
	c.text(20, 30, title, c.bold, colText)
	c.text(20, 52, subtitle, c.small, colLimit)

	y := top
	for _, p := range panels {
		c.text(20, y+22, p.Title, c.bold, colText)
		y += 40
		scale := 0.0
		for _, b := range p.Bars {
			scale = max(scale, b.Value, b.Hi)
		}
		scale = max(scale, p.Target) * 1.05
		if scale == 0 {
			scale = 1
		}
		plotW := width - left - right
		x := func(v float64) int { return left + int(float64(plotW)*v/scale) }
		// Grid at round steps.
		step := niceStep(scale / 5)
		bottom := y + len(p.Bars)*(barH+gap)
		for v := 0.0; v <= scale; v += step {
			c.vline(x(v), y-4, bottom, colGrid, false)
			c.text(x(v)-10, bottom+16, short(v), c.small, colLimit)
		}
		c.text(left+plotW+10, bottom+16, p.Unit, c.small, colLimit)
		for i, b := range p.Bars {
			by := y + i*(barH+gap)
			c.textRight(left-10, by+barH-8, b.Label, c.regular, colText)
			if b.Hi > b.Value {
				c.rect(x(b.Value), by, x(b.Hi), by+barH, lighter(b.Color))
			}
			c.rect(left, by, x(b.Value), by+barH, b.Color)
			label := short(b.Value)
			end := x(b.Value)
			if b.Hi > 0 {
				label = fmt.Sprintf("%s (p95 %s)", short(b.Value), short(b.Hi))
				end = max(end, x(b.Hi))
			}
			c.text(end+6, by+barH-8, label, c.regular, colText)
		}
		if p.Target > 0 {
			c.vline(x(p.Target), y-8, bottom, colTarget, true)
			c.text(x(p.Target)+4, y-8, p.TLabel, c.small, colTarget)
		}
		y = bottom + 40
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, c.img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (c *canvas) text(x, y int, s string, face font.Face, col color.Color) {
	d := font.Drawer{Dst: c.img, Src: image.NewUniform(col), Face: face, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

func (c *canvas) textRight(x, y int, s string, face font.Face, col color.Color) {
	w := font.MeasureString(face, s).Round()
	c.text(x-w, y, s, face, col)
}

func (c *canvas) rect(x0, y0, x1, y1 int, col color.RGBA) {
	draw.Draw(c.img, image.Rect(x0, y0, x1, y1), image.NewUniform(col), image.Point{}, draw.Over)
}

func (c *canvas) vline(x, y0, y1 int, col color.RGBA, dashed bool) {
	for y := y0; y < y1; y++ {
		if dashed && (y/5)%2 == 1 {
			continue
		}
		c.img.Set(x, y, col)
		if dashed {
			c.img.Set(x+1, y, col)
		}
	}
}

// lighter blends col halfway to white.
func lighter(col color.RGBA) color.RGBA {
	mix := func(v uint8) uint8 { return uint8((int(v) + 255*3/2) * 2 / 5) }
	return color.RGBA{mix(col.R), mix(col.G), mix(col.B), 0xff}
}

func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			return m * mag
		}
	}
	return 10 * mag
}

// short formats a number for a label: 12,345 / 1,234 / 2.35 / 0.25.
func short(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 100:
		return commas(int64(math.Round(v)))
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func commas(n int64) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
