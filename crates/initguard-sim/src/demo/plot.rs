//! `initguard demo --plot FILE.svg`: the pile of pods waiting on an initializer over time,
//! without and with the guard, drawn from the samples the demo took of the simulated cluster
//! (every tick, [`super::RunStats::waiting_over_time`]), never from numbers written by hand.

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use super::DemoSummary;

/// Size of the picture, in SVG pixels.
const SIZE: (u32, u32) = (900, 420);

/// Why the picture could not be written.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    #[error("cannot draw the plot: {0}")]
    Draw(String),
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Draws `summary` as SVG text.
pub fn svg(summary: &DemoSummary) -> Result<String, PlotError> {
    let mut text = String::new();
    draw(summary, &mut text).map_err(|e| PlotError::Draw(e.to_string()))?;
    Ok(text)
}

/// Draws `summary` into the SVG file at `path`.
pub fn write_svg(summary: &DemoSummary, path: &Path) -> Result<(), PlotError> {
    let text = svg(summary)?;
    std::fs::write(path, text).map_err(|source| PlotError::Write {
        path: path.to_owned(),
        source,
    })
}

fn draw(summary: &DemoSummary, out: &mut String) -> Result<(), Box<dyn std::error::Error>> {
    let without = &summary.without_guard.waiting_over_time;
    let with = &summary.with_guard.waiting_over_time;
    let end = without
        .iter()
        .chain(with)
        .map(|(t, _)| *t)
        .fold(1.0_f64, f64::max);
    let peak = without
        .iter()
        .chain(with)
        .map(|(_, n)| *n)
        .max()
        .unwrap_or(0);
    let top = (peak + peak / 10 + 1) as f64;

    let root = SVGBackend::with_string(out, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let mechanism = match summary.mechanism.as_str() {
        "initializers" => "legacy initializers",
        _ => "scheduling gates",
    };
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("Pods waiting during an initializer owner outage ({mechanism})"),
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..end, 0.0..top)?;
    chart
        .configure_mesh()
        .x_desc("seconds into the scenario")
        .y_desc("pods waiting on an initializer")
        .x_label_formatter(&|v| format!("{v:.0}"))
        .y_label_formatter(&|v| format!("{v:.0}"))
        .light_line_style(WHITE.mix(0.0))
        .draw()?;

    // The owner's outage, shaded: what both runs live through.
    if let Some((from, to)) = summary.outage {
        let shade = RGBColor(0xf3, 0xd9, 0xa4).mix(0.45);
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(from, 0.0), (to.min(end), top)],
                shade.filled(),
            )))?
            .label("owner down")
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 16, y + 5)], shade.filled()));
    }
    let red = RGBColor(0xc0, 0x39, 0x2b);
    let blue = RGBColor(0x1f, 0x6f, 0xb2);
    for (series, colour, label) in [
        (without, red, "without initguard"),
        (with, blue, "with initguard"),
    ] {
        chart
            .draw_series(LineSeries::new(
                series.iter().map(|(t, n)| (*t, *n as f64)),
                colour.stroke_width(3),
            ))?
            .label(label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], colour.stroke_width(3))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::demo::RunStats;
    use kube_common::Mechanism;

    fn summary() -> DemoSummary {
        DemoSummary {
            mechanism: Mechanism::SchedulingGates,
            without_guard: RunStats {
                waiting_over_time: vec![(0.0, 0), (10.0, 12), (20.0, 30)],
                ..RunStats::default()
            },
            with_guard: RunStats {
                with_guard: true,
                waiting_over_time: vec![(0.0, 0), (10.0, 3), (20.0, 1)],
                ..RunStats::default()
            },
            guard_url: String::new(),
            outage: Some((4.0, 14.0)),
        }
    }

    #[test]
    fn the_plot_has_both_series_and_the_outage() {
        let text = svg(&summary()).unwrap();
        assert!(text.starts_with("<svg"), "{}", &text[..text.len().min(80)]);
        for label in ["without initguard", "with initguard", "owner down"] {
            assert!(text.contains(label), "no {label:?} in the SVG");
        }
        // Each series is a polyline in its colour (and its legend sample another).
        for colour in ["#C0392B", "#1F6FB2"] {
            let lines = text
                .lines()
                .filter(|l| l.contains("<polyline") && l.contains(colour))
                .count();
            assert_eq!(lines, 2, "{colour}: the series and its legend sample");
        }
    }

    #[test]
    fn an_unwritable_path_is_named() {
        let err = write_svg(&summary(), Path::new("/nonexistent/dir/plot.svg")).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("cannot write /nonexistent/dir/plot.svg:"),
            "{err}"
        );
    }
}
