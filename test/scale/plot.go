package main

import (
	"errors"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

const (
	// plotWidth and panelHeight size the PNG: three panels, one above the other.
	plotWidth, panelHeight = 10 * vg.Inch, 3.2 * vg.Inch
	// headroom keeps a panel's highest point off its top edge.
	headroom = 1.08
	// legendGap separates a panel's data area from its legend, on its right.
	legendGap = 3 * vg.Millimeter
)

// plotPath is where the run's PNG goes: beside the report file, its extension replaced
// by .png, so that the two can be copied together; or scale.png in the run's folder
// when the report goes to stdout only.
func plotPath(out, dir string) string {
	if out == "" {
		return filepath.Join(dir, "scale.png")
	}
	if strings.EqualFold(filepath.Ext(out), ".png") {
		// -o x.png would otherwise have the plot overwrite the report.
		return out + ".png"
	}
	return strings.TrimSuffix(out, filepath.Ext(out)) + ".png"
}

// plot draws the run's PNG (see plotPath) and remembers its path for the report. A plot
// that cannot be drawn is logged: the report's figures stand without it.
func (b *bench) plot() {
	path := plotPath(b.o.out, b.o.dir)
	if err := drawPlot(path, b.timeline()); err != nil {
		logf("Warning: no plot: %v", err)
		return
	}
	b.plotFile = path
	logf("Plot: %s", path)
}

// timeline gathers what the plot shows of the run. A provider's lines take its
// backend's colour, so that one colour follows a backend through the three panels; the
// shards of a kind share its colour, each dashed after its index (the first solid).
func (b *bench) timeline() timeline {
	title := fmt.Sprintf("N = %d (%s)", b.o.vms, b.shares())
	if b.sharded() {
		title += "; " + b.layout()
	}
	tl := timeline{
		title:   title,
		ready:   readyCurves(b.readyChanges, b.createdFrom, b.sampledUntil),
		samples: b.samples,
		marks:   []phaseMark{{at: b.readyAt.Seconds(), name: "all Ready"}, {at: b.deleteFrom.Seconds(), name: "delete", right: true}},
		end:     b.sampledUntil.Seconds(),
		styles:  map[string]draw.LineStyle{harnessName: {Color: harnessColor}},
	}
	addProcess := func(name string, c color.Color, shard int) {
		tl.processes = append(tl.processes, name)
		tl.styles[name] = draw.LineStyle{Color: c, Dashes: plotutil.Dashes(shard)}
	}
	for i, p := range b.core {
		addProcess(p.Name, coreColor, i)
	}
	for i, be := range b.backends {
		c := backendColors[i%len(backendColors)]
		tl.styles[be.class] = draw.LineStyle{Color: c}
		for j, sh := range be.shards {
			addProcess(sh.proc.Name, c, j)
		}
		if be.vms > 0 {
			tl.backends = append(tl.backends, be.class)
		}
	}
	tl.clients = append(slices.Clone(tl.processes), harnessName)
	return tl
}

// The colours of the lines: the core controller's, the harness's (whose writes are
// the user's creations and deletions) and, in turn, the backends'.
var (
	coreColor     = plotutil.DarkColors[4]
	harnessColor  = plotutil.DarkColors[3]
	backendColors = []color.Color{plotutil.DarkColors[0], plotutil.DarkColors[1], plotutil.DarkColors[2], plotutil.DarkColors[5]}
)

// timeline is what the plot shows of a run, times in seconds since the first create.
type timeline struct {
	title string
	// ready are the VMs Ready over time by backend; backends lists those with VMs.
	ready    map[string]plotter.XYs
	backends []string
	// samples are the scraped series; processes name the controllers among them, core
	// first, and clients every writer, the harness last.
	samples   []sample
	processes []string
	clients   []string
	marks     []phaseMark
	end       float64
	// styles are the lines' colours and dashes by backend, process or client name;
	// addLine sets their width.
	styles map[string]draw.LineStyle
}

// drawPlot writes tl as a PNG of three panels sharing the time axis: VMs Ready by
// backend, API writes per second and each controller's RSS.
func drawPlot(path string, tl timeline) error {
	panels := []*plot.Plot{readyPanel(tl), writesPanel(tl), rssPanel(tl)}
	panels[0].Title.Text = tl.title
	panels[len(panels)-1].X.Label.Text = "seconds since the first create"
	for i, p := range panels {
		p.X.Min, p.X.Max = 0, tl.end
		p.Y.Min = 0
		p.Y.Max = max(p.Y.Max, 1) * headroom
		for _, m := range tl.marks {
			// The marks are named once, on the top panel; below, the lines suffice.
			m.named = i == 0
			p.Add(m)
		}
	}
	img := vgimg.New(plotWidth, panelHeight*vg.Length(len(panels)))
	drawPanels(draw.New(img), panels)
	f, err := os.Create(path) //nolint:gosec // the path the user chose for the report, or the run's own folder
	if err != nil {
		return err
	}
	_, err = vgimg.PngCanvas{Canvas: img}.WriteTo(f)
	return errors.Join(err, f.Close())
}

// drawPanels draws the panels one above the other on dc, their data areas aligned so
// that they share the time axis, each legend to the right of its panel: inside, a
// legend would hide lines wherever it went.
func drawPanels(dc draw.Canvas, panels []*plot.Plot) {
	legends := make([]plot.Legend, len(panels))
	var legendWidth vg.Length
	for i, p := range panels {
		legends[i], p.Legend = p.Legend, plot.NewLegend()
		legends[i].Top, legends[i].Left = true, true
		r := legends[i].Rectangle(dc)
		legendWidth = max(legendWidth, r.Max.X-r.Min.X)
	}
	pad := vg.Points(6)
	tiles := draw.Tiles{Rows: len(panels), Cols: 1, PadTop: pad, PadBottom: pad, PadLeft: pad, PadRight: pad + legendGap + legendWidth, PadY: 2 * pad}
	rows := make([][]*plot.Plot, len(panels))
	for i, p := range panels {
		rows[i] = []*plot.Plot{p}
	}
	for i, row := range plot.Align(rows, tiles, dc) {
		c := row[0]
		panels[i].Draw(c)
		c.Min.X, c.Max.X = c.Max.X+legendGap, c.Max.X+legendGap+legendWidth
		legends[i].Draw(c)
	}
}

// readyPanel draws how many VMs of each backend were Ready.
func readyPanel(tl timeline) *plot.Plot {
	p := plot.New()
	p.Y.Label.Text = "VMs Ready"
	for _, be := range tl.backends {
		addLine(p, be, tl.ready[be], tl.styles[be], plotter.PostStep)
	}
	return p
}

// writesPanel draws the Kubernetes API writes per second of all clients together and
// of each, each interval's rate at its end, as Prometheus's rate() is drawn.
func writesPanel(tl timeline) *plot.Plot {
	p := plot.New()
	p.Y.Label.Text = "API writes / s"
	addLine(p, "all clients", rates(tl.samples, allWrites), draw.LineStyle{Color: color.Black}, plotter.NoStep)
	for _, name := range tl.clients {
		addLine(p, name, rates(tl.samples, writesOf(name)), tl.styles[name], plotter.NoStep)
	}
	return p
}

// rssPanel draws each controller process's resident set, every shard's its own line.
func rssPanel(tl timeline) *plot.Plot {
	p := plot.New()
	p.Y.Label.Text = "RSS (MiB)"
	for _, name := range tl.processes {
		addLine(p, name, levels(tl.samples, rssOf(name), mib), tl.styles[name], plotter.NoStep)
	}
	return p
}

// addLine adds a named line in the colour and dashes of style, unless it has no
// points.
func addLine(p *plot.Plot, name string, xys plotter.XYs, style draw.LineStyle, step plotter.StepKind) {
	if len(xys) == 0 {
		return
	}
	l, err := plotter.NewLine(xys)
	if err != nil {
		// Only NaN or infinite points fail, and the series have none; a line left out
		// is better than a run lost.
		logf("Warning: the plot leaves %s out: %v", name, err)
		return
	}
	l.LineStyle, l.StepStyle = style, step
	l.Width = vg.Points(1.5)
	p.Add(l)
	p.Legend.Add(name, l)
}

// phaseMark is a dashed vertical line across a panel at a moment of the run, such as
// all VMs Ready or the start of the deletions.
type phaseMark struct {
	at    float64 // seconds since the first create
	name  string
	named bool // whether to write the name beside the line
	// right writes the name right of the line, rather than left: "all Ready" goes left
	// of its line and "delete" right of its own, so two marks close together on a long
	// run never write over each other. The names go half way up.
	right bool
}

// markStyle draws phase marks grey and dashed, behind the data's colours.
var markStyle = draw.LineStyle{Color: color.Gray{Y: 110}, Width: vg.Points(1), Dashes: []vg.Length{vg.Points(4), vg.Points(3)}}

// Plot draws the mark, implementing plot.Plotter.
func (m phaseMark) Plot(c draw.Canvas, p *plot.Plot) {
	if m.at < p.X.Min || m.at > p.X.Max {
		return
	}
	trX, _ := p.Transforms(&c)
	x := trX(m.at)
	c.StrokeLine2(markStyle, x, c.Min.Y, x, c.Max.Y)
	if !m.named {
		return
	}
	sty := p.Title.TextStyle
	sty.Color = markStyle.Color
	sty.XAlign, sty.YAlign = draw.XRight, draw.YCenter
	gap := vg.Points(3)
	if m.right {
		sty.XAlign, gap = draw.XLeft, -gap
	}
	c.FillText(sty, vg.Point{X: x - gap, Y: c.Center().Y}, m.name)
}
