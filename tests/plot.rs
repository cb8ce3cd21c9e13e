//! The SVG chart writer: a two-series chart (one dashed) has the title, legend names and lines,
//! the same chart gives the same bytes twice, and bad data (no series, NaN, x ≤ 0 on a log axis,
//! an unwritable path) is an error, not a panic.

use std::path::PathBuf;

#[path = "../examples/support/plot.rs"]
mod plot;

use plot::{render_svg, write_svg, Chart, Series};
use triaxis::Error;

fn temp_dir(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("triaxis-plot-{name}-{}", std::process::id()))
}

/// Pipeline bubble vs microbatch count: theory (p-1)/(m+p-1) for p = 4, and "measured" points.
fn bubble_series() -> Vec<Series> {
    let ms = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0];
    let theory = ms.iter().map(|&m| (m, 3.0 / (m + 3.0))).collect();
    let measured = ms.iter().map(|&m| (m, 3.0 / (m + 3.0) + 0.02)).collect();
    vec![
        Series::theory("theory (p=4)", theory),
        Series::measured("measured & <1F1B>", measured),
    ]
}

fn chart(series: &[Series]) -> Chart<'_> {
    Chart {
        title: "Pipeline bubble vs microbatches",
        x_label: "microbatches per step",
        y_label: "bubble fraction",
        log_x: true,
        y_percent: true,
        series,
    }
}

#[test]
fn writes_title_legend_and_lines_deterministically() {
    let series = bubble_series();
    let dir = temp_dir("ok");
    let path = dir.join("nested/bubble.svg");
    write_svg(&path, &chart(&series)).unwrap();
    let first = std::fs::read(&path).unwrap();
    let text = String::from_utf8(first.clone()).unwrap();
    assert!(
        text.starts_with("<svg"),
        "starts with {:?}",
        &text[..text.len().min(40)]
    );
    assert!(text.contains("Pipeline bubble vs microbatches"));
    assert!(text.contains("theory (p=4)"));
    assert!(
        text.contains("measured &amp; &lt;1F1B&gt;"),
        "legend names are XML-escaped"
    );
    assert!(text.contains("<polyline") || text.contains("<path"));
    assert!(text.contains(">\nmicrobatches per step\n</text>"));
    assert!(text.contains(">\nbubble fraction\n</text>"));
    // y (max 77%): percent ticks in steps of 20%, up to 80%.
    for tick in ["0%", "20%", "80%"] {
        assert!(
            text.contains(&format!(">\n{tick}\n</text>")),
            "missing y tick {tick}"
        );
    }
    assert!(
        !text.contains("100%"),
        "y axis ends at the first tick above the data"
    );
    // Log axis ticks at the powers of two of the data.
    for tick in ["1", "2", "4", "8", "16", "32", "64"] {
        assert!(
            text.contains(&format!(">\n{tick}\n</text>")),
            "missing x tick {tick}"
        );
    }
    write_svg(&path, &chart(&series)).unwrap();
    assert_eq!(
        first,
        std::fs::read(&path).unwrap(),
        "same chart, different bytes"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn linear_axes_and_single_points() {
    let series = [
        Series::measured(
            "step time",
            vec![(1.0, 0.25), (2.0, 0.14), (4.0, 0.09), (8.0, 0.07)],
        ),
        Series::theory("one point", vec![(3.0, 0.1)]),
    ];
    let c = Chart {
        title: "Step time vs TP degree",
        x_label: "tensor-parallel degree",
        y_label: "seconds",
        log_x: false,
        y_percent: false,
        series: &series,
    };
    let svg = render_svg(&c).unwrap();
    assert!(svg.contains("Step time vs TP degree") && svg.contains("<circle"));
    // All-equal values still give a chart.
    let flat = [Series::measured("flat", vec![(5.0, 0.0), (5.0, 0.0)])];
    render_svg(&Chart { series: &flat, ..c }).unwrap();
    // Extreme magnitudes: a chart or a Config error, never a panic.
    for (a, b) in [
        (-f64::MAX, f64::MAX),
        (1e-300, 2e-300),
        (f64::MIN_POSITIVE, 1e300),
    ] {
        let s = [Series::measured("extreme", vec![(a, a), (b, b)])];
        for log_x in [false, true] {
            let r = render_svg(&Chart {
                series: &s,
                log_x,
                ..c
            });
            assert!(matches!(r, Ok(_) | Err(Error::Config(_))), "{r:?}");
        }
    }
}

#[test]
fn bad_data_is_an_error() {
    let dir = temp_dir("bad");
    let path = dir.join("bad.svg");
    let is_config = |r: triaxis::Result<()>| matches!(r, Err(Error::Config(_)));
    assert!(
        is_config(write_svg(&path, &chart(&[]))),
        "empty series list"
    );
    let nan = [Series::measured("nan", vec![(1.0, 0.5), (2.0, f64::NAN)])];
    assert!(is_config(write_svg(&path, &chart(&nan))), "NaN value");
    let inf = [Series::theory("inf", vec![(f64::INFINITY, 0.5)])];
    assert!(is_config(write_svg(&path, &chart(&inf))), "infinite value");
    let zero = [Series::measured("zero x", vec![(0.0, 0.5), (2.0, 0.1)])];
    assert!(
        is_config(write_svg(&path, &chart(&zero))),
        "x = 0 on a log axis"
    );
    let empty = [Series::measured("empty", vec![])];
    assert!(
        is_config(write_svg(&path, &chart(&empty))),
        "series without points"
    );
    assert!(!path.exists(), "nothing written for bad data");

    // A parent that is a file: an I/O error.
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let series = bubble_series();
    let r = write_svg(&file.join("chart.svg"), &chart(&series));
    assert!(matches!(r, Err(Error::Io { .. })), "{r:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}
