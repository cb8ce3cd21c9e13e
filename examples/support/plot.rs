//! Line charts as SVG files, for the examples (pipeline bubble vs microbatch count, step time vs
//! tensor-parallel degree, …).
//!
//! Built on `plotters` with only its SVG backend: text is written as SVG `<text>` elements, so no
//! font files or system font libraries are needed. The layout is fixed (900×560, title on top,
//! legend in its own column right of the plot so it never hides data), colours come from a fixed
//! palette in series order, and tick positions are computed here, so the same chart always gives
//! the same bytes. Dashed series (theory) are drawn as dashed lines without markers; solid series
//! (measurements) as lines with a round marker on every point.
//!
//! Included by each example with `#[path = "support/plot.rs"] mod plot;`.

#![allow(dead_code)] // each example uses its own part

use std::path::Path;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use triaxis::{Error, Result};

/// One line of a chart: `points` are `(x, y)` in data units, drawn in the given order.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// The name shown in the legend.
    pub name: String,
    pub points: Vec<(f64, f64)>,
    /// Dashed line, no markers (a model or theory curve); otherwise solid line with markers
    /// (measurements).
    pub dashed: bool,
}

impl Series {
    /// A measured series: solid line with a marker on every point.
    pub fn measured(name: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Series {
            name: name.into(),
            points,
            dashed: false,
        }
    }

    /// A theory series: dashed line, no markers.
    pub fn theory(name: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Series {
            name: name.into(),
            points,
            dashed: true,
        }
    }
}

/// A whole chart: labels, axis kinds and the series to draw (colours follow series order).
#[derive(Debug, Clone, Copy)]
pub struct Chart<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    /// Logarithmic x axis (base 2: ticks at powers of two, e.g. 1, 2, 4, …, 64); all x must be > 0.
    pub log_x: bool,
    /// y values are fractions (0.25) shown as percent (25%).
    pub y_percent: bool,
    pub series: &'a [Series],
}

/// Canvas size in pixels.
const WIDTH: u32 = 900;
const HEIGHT: u32 = 560;
const FONT: &str = "sans-serif";

/// Tableau-10 colours, in series order (repeats after ten series).
const PALETTE: [RGBColor; 10] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0x7f, 0x7f, 0x7f),
    RGBColor(0xbc, 0xbd, 0x22),
    RGBColor(0x17, 0xbe, 0xcf),
];

/// Writes `chart` as an SVG file at `path` (parent folders created).
///
/// Bad data (no series, a series without points, NaN or infinite values, x ≤ 0 on a log axis)
/// gives `Error::Config`; file problems give `Error::Io`. Never panics.
pub fn write_svg(path: &Path, chart: &Chart) -> Result<()> {
    let svg = render_svg(chart)?;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|source| Error::Io {
            path: parent.display().to_string(),
            source,
        })?;
    }
    std::fs::write(path, svg).map_err(|source| Error::Io {
        path: path.display().to_string(),
        source,
    })
}

/// The SVG text of `chart` (what `write_svg` writes).
pub fn render_svg(chart: &Chart) -> Result<String> {
    validate(chart)?;
    let x = x_axis(chart);
    let y = y_axis(chart);
    let mut svg = String::new();
    draw(&mut svg, chart, &x, &y)
        .map_err(|e| Error::Config(format!("cannot draw chart {:?}: {e}", chart.title)))?;
    Ok(svg)
}

fn validate(chart: &Chart) -> Result<()> {
    let bad = |msg: String| Err(Error::Config(format!("chart {:?}: {msg}", chart.title)));
    if chart.series.is_empty() {
        return bad("no series to plot".into());
    }
    for s in chart.series {
        if s.points.is_empty() {
            return bad(format!("series {:?} has no points", s.name));
        }
        for (i, &(x, y)) in s.points.iter().enumerate() {
            if !x.is_finite() || !y.is_finite() {
                return bad(format!(
                    "series {:?} point {i} is ({x}, {y}): values must be finite",
                    s.name
                ));
            }
            if chart.log_x && x <= 0.0 {
                return bad(format!(
                    "series {:?} point {i} has x = {x}: a log x axis needs x > 0",
                    s.name
                ));
            }
        }
    }
    Ok(())
}

/// One axis in plot units: the drawn range, tick positions and how to label a tick.
struct Axis {
    lo: f64,
    hi: f64,
    ticks: Vec<f64>,
    /// Plot units → data units (log axes plot log2(x)).
    log2: bool,
    percent: bool,
    /// Digits after the decimal point in tick labels.
    decimals: usize,
}

impl Axis {
    fn to_plot(&self, v: f64) -> f64 {
        if self.log2 {
            v.log2()
        } else {
            v
        }
    }

    fn label(&self, v: f64) -> String {
        if self.log2 {
            let d = v.exp2();
            return if d >= 1.0 {
                format!("{}", d.round())
            } else {
                format!("{d}")
            };
        }
        // `+ 0.0` turns -0 into 0, so no "-0" label.
        if self.percent {
            format!("{:.*}%", self.decimals, v * 100.0 + 0.0)
        } else {
            format!("{:.*}", self.decimals, v + 0.0)
        }
    }

    fn coord(&self) -> Ticked {
        Ticked {
            inner: (self.lo..self.hi).into(),
            ticks: self.ticks.clone(),
        }
    }
}

/// A linear f64 coordinate with exactly the given ticks (bold grid lines, no light ones), and
/// default formatting so the mesh can take our label formatters.
struct Ticked {
    inner: RangedCoordf64,
    ticks: Vec<f64>,
}

impl Ranged for Ticked {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.inner.map(value, limit)
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.inner.range()
    }
}

/// A "nice" tick step (1, 2, 2.5 or 5 × 10^k) giving about six intervals over `span`, and the
/// number of decimals its multiples need.
fn nice_step(span: f64) -> (f64, usize) {
    let raw = span / 6.0;
    let p = raw.log10().floor();
    let base = 10f64.powf(p);
    let (m, extra) = [(1.0, 0), (2.0, 0), (2.5, 1), (5.0, 0), (10.0, 0)]
        .into_iter()
        .find(|&(m, _)| m * base >= raw * 0.999)
        .unwrap_or((10.0, 0));
    let step = m * base;
    let decimals = (-(step.log10().floor()) as i64 + extra).max(0) as usize;
    (step, decimals)
}

/// Multiples of `step` in `[lo, hi]` (with a little slack for rounding).
/// Empty when the numbers overflow (spans near f64::MAX).
fn multiples(lo: f64, hi: f64, step: f64) -> Vec<f64> {
    let (first, last) = ((lo / step - 1e-9).ceil(), (hi / step + 1e-9).floor());
    if !(first.is_finite() && last.is_finite() && last - first <= 100.0) {
        return Vec::new();
    }
    let (first, last) = (first as i64, last as i64);
    (first..=last).map(|k| k as f64 * step).collect()
}

fn data_range(values: impl Iterator<Item = f64>) -> (f64, f64) {
    values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    })
}

fn x_axis(chart: &Chart) -> Axis {
    let pts = || chart.series.iter().flat_map(|s| s.points.iter());
    if chart.log_x {
        let (mut lo, mut hi) = data_range(pts().map(|p| p.0.log2()));
        if hi - lo < 1e-9 {
            (lo, hi) = (lo - 1.0, hi + 1.0);
        }
        let pad = 0.04 * (hi - lo);
        let (first, last) = (lo.floor() as i64, hi.ceil() as i64);
        let stride = ((last - first) as usize).div_ceil(12).max(1);
        let ticks = (first..=last)
            .step_by(stride)
            .map(|k| k as f64)
            .filter(|&u| u >= lo - pad && u <= hi + pad)
            .collect();
        return Axis {
            lo: lo - pad,
            hi: hi + pad,
            ticks,
            log2: true,
            percent: false,
            decimals: 0,
        };
    }
    let (mut lo, mut hi) = data_range(pts().map(|p| p.0));
    if hi - lo < 1e-12 * lo.abs().max(1.0) {
        let d = 0.5 * lo.abs().max(1.0);
        (lo, hi) = (lo - d, hi + d);
    }
    let pad = 0.03 * (hi - lo);
    let (step, decimals) = nice_step(hi - lo);
    let ticks = multiples(lo - pad, hi + pad, step);
    Axis {
        lo: lo - pad,
        hi: hi + pad,
        ticks,
        log2: false,
        percent: false,
        decimals,
    }
}

fn y_axis(chart: &Chart) -> Axis {
    let (lo, hi) = data_range(
        chart
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1)),
    );
    // Zero is always on the y axis, so bar-like comparisons are honest.
    let (mut lo, mut hi) = (lo.min(0.0), hi.max(0.0));
    if hi - lo < 1e-300 {
        hi = lo + 1.0;
    }
    let (step, mut decimals) = nice_step(hi - lo);
    (lo, hi) = ((lo / step).floor() * step, (hi / step).ceil() * step);
    let ticks = multiples(lo, hi, step);
    let pad = 0.03 * (hi - lo);
    if chart.y_percent {
        decimals = decimals.saturating_sub(2);
    }
    Axis {
        lo: lo - pad,
        hi: hi + pad,
        ticks,
        log2: false,
        percent: chart.y_percent,
        decimals,
    }
}

/// Legend column width: room for the longest name (about 9 px a character; plotters draws size 17 as 13.7 px).
fn legend_width(chart: &Chart) -> u32 {
    let longest = chart
        .series
        .iter()
        .map(|s| s.name.chars().count())
        .max()
        .unwrap_or(0);
    (60 + 9 * longest as u32).clamp(150, 380)
}

type DrawResult<E> = std::result::Result<(), DrawingAreaErrorKind<E>>;

fn draw(svg: &mut String, chart: &Chart, x: &Axis, y: &Axis) -> DrawResult<std::io::Error> {
    let root = SVGBackend::with_string(svg, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE)?;
    let body = root.titled(chart.title, (FONT, 26))?;
    let (plot_area, legend_area) = body.split_horizontally(WIDTH - legend_width(chart));

    let mut plot = ChartBuilder::on(&plot_area)
        .margin_left(10)
        .margin_right(20)
        .margin_top(10)
        .margin_bottom(5)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .build_cartesian_2d(x.coord(), y.coord())?;
    let x_fmt = |v: &f64| x.label(*v);
    let y_fmt = |v: &f64| y.label(*v);
    plot.configure_mesh()
        .x_desc(chart.x_label)
        .y_desc(chart.y_label)
        .axis_desc_style((FONT, 18))
        .label_style((FONT, 15))
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt)
        .bold_line_style(RGBColor(0xdd, 0xdd, 0xdd))
        .axis_style(RGBColor(0x44, 0x44, 0x44))
        .max_light_lines(0)
        .draw()?;

    for (i, s) in chart.series.iter().enumerate() {
        let colour = PALETTE[i % PALETTE.len()];
        let line = colour.stroke_width(2);
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .map(|&(px, py)| (x.to_plot(px), py))
            .collect();
        if s.dashed {
            plot.draw_series(DashedLineSeries::new(pts.iter().copied(), 8, 5, line))?;
        } else {
            plot.draw_series(LineSeries::new(pts.iter().copied(), line))?;
        }
        // Markers on measurements, and on a lone theory point (a dash of one point is invisible).
        if !s.dashed || pts.len() == 1 {
            plot.draw_series(pts.iter().map(|&p| Circle::new(p, 4, colour.filled())))?;
        }
    }

    // Legend: one row per series, sample line (and marker) then the name.
    let text = TextStyle::from((FONT, 17).into_font())
        .color(&BLACK)
        .pos(Pos::new(HPos::Left, VPos::Center));
    for (i, s) in chart.series.iter().enumerate() {
        let colour = PALETTE[i % PALETTE.len()];
        let line = colour.stroke_width(2);
        let row = 30 + 26 * i as i32;
        if s.dashed {
            for x0 in [6, 19, 32] {
                legend_area.draw(&PathElement::new(vec![(x0, row), (x0 + 8, row)], line))?;
            }
        } else {
            legend_area.draw(&PathElement::new(vec![(6, row), (40, row)], line))?;
            legend_area.draw(&Circle::new((23, row), 4, colour.filled()))?;
        }
        legend_area.draw(&Text::new(s.name.clone(), (48, row), text.clone()))?;
    }
    root.present()?;
    Ok(())
}
