//! `gpuinfer simulate --plot`: tasks and backlog over time, the AWS sample's policy against ours, one row of two
//! charts per tier, as an SVG file.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::event_loop::Sample;
use super::time::hours;
use crate::contract::tier::Tier;

/// One tier's samples under each policy.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TierSeries<'a> {
    pub tier: Tier,
    pub sample: &'a [Sample],
    pub ours: &'a [Sample],
}

#[derive(Debug, thiserror::Error)]
#[error("cannot draw {path}: {detail}")]
pub(crate) struct PlotError {
    path: String,
    detail: String,
}

const SAMPLE_COLOR: RGBColor = RGBColor(214, 39, 40);
const OURS_COLOR: RGBColor = RGBColor(31, 119, 180);

pub(crate) fn write_svg(path: &Path, tiers: &[TierSeries<'_>]) -> Result<(), PlotError> {
    draw(path, tiers).map_err(|e| PlotError { path: path.display().to_string(), detail: e.to_string() })
}

type DrawResult = Result<(), DrawingAreaErrorKind<std::io::Error>>;

fn draw(path: &Path, tiers: &[TierSeries<'_>]) -> DrawResult {
    let root = SVGBackend::new(path, (1200, 360 * tiers.len().max(1) as u32)).into_drawing_area();
    root.fill(&WHITE)?;
    let areas = root.split_evenly((tiers.len().max(1), 2));
    for (series, row) in tiers.iter().zip(areas.chunks(2)) {
        let tasks = |s: &Sample| f64::from(s.tasks);
        let backlog = |s: &Sample| s.backlog as f64;
        chart(&row[0], &format!("{} tier: tasks (billed)", series.tier), series, tasks)?;
        chart(&row[1], &format!("{} tier: backlog (requests waiting)", series.tier), series, backlog)?;
    }
    root.present()
}

fn chart(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    title: &str,
    series: &TierSeries<'_>,
    value: impl Fn(&Sample) -> f64,
) -> DrawResult {
    let points = |samples: &[Sample]| samples.iter().map(|s| (hours(s.at), value(s))).collect::<Vec<_>>();
    let (sample, ours) = (points(series.sample), points(series.ours));
    let x_max = sample.iter().chain(&ours).map(|p| p.0).fold(1.0, f64::max);
    let y_max = sample.iter().chain(&ours).map(|p| p.1).fold(1.0, f64::max) * 1.1;
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(32)
        .y_label_area_size(48)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)?;
    chart.configure_mesh().x_desc("hours").draw()?;
    for (name, color, points) in [("sample", SAMPLE_COLOR, sample), ("ours", OURS_COLOR, ours)] {
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
    }
    chart.configure_series_labels().border_style(BLACK).background_style(WHITE.mix(0.8)).draw()
}
