//! A run's curves as a PNG: the training loss, and a check made now and
//! then (test accuracy, validation loss).

use plotters::prelude::*;
use std::path::Path;

/// Fonts tried for the plot's text; without one the curves are drawn bare.
const FONTS: [&str; 3] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/Library/Fonts/Arial Unicode.ttf",
];

fn register_font() -> bool {
    let Some(bytes) = FONTS.iter().find_map(|p| std::fs::read(p).ok()) else { return false };
    plotters::style::register_font("sans-serif", FontStyle::Normal, Box::leak(bytes.into_boxed_slice())).is_ok()
}

/// The right-hand panel: a measurement taken now and then during a run.
pub struct Checks<'a> {
    pub title: &'a str,
    pub y_desc: &'a str,
    /// `(step, value)`.
    pub points: &'a [(u64, f32)],
    /// Accuracies are drawn up to 1, losses from 0.
    pub accuracy: bool,
}

/// Training loss per step (`losses`, labelled `loss_desc`) and `checks`,
/// side by side.
pub fn write(path: &Path, title: &str, losses: &[f32], loss_desc: &str, checks: Checks) -> Result<(), String> {
    let text = register_font();
    let root = BitMapBackend::new(path, (1200, 450)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let (left, right) = root.split_horizontally(600);
    let steps = losses.len().max(1) as f64;
    let top = losses.iter().copied().fold(0.1f32, f32::max) as f64 * 1.05;
    let mut chart = ChartBuilder::on(&left);
    chart.margin(15).x_label_area_size(35).y_label_area_size(50);
    if text {
        chart.caption(format!("{title}: training loss"), ("sans-serif", 18));
    }
    let mut c = chart.build_cartesian_2d(0f64..steps, 0f64..top).map_err(|e| e.to_string())?;
    if text {
        c.configure_mesh().x_desc("step").y_desc(loss_desc).draw().map_err(|e| e.to_string())?;
    }
    let series = losses.iter().enumerate().map(|(i, &l)| (i as f64, l as f64));
    c.draw_series(LineSeries::new(series, &BLUE)).map_err(|e| e.to_string())?;

    let mut chart = ChartBuilder::on(&right);
    chart.margin(15).x_label_area_size(35).y_label_area_size(50);
    if text {
        chart.caption(checks.title, ("sans-serif", 18));
    }
    let values = checks.points.iter().map(|p| p.1 as f64);
    let range = if checks.accuracy {
        values.fold(1.0f64, f64::min).min(0.9)..1.0
    } else {
        0.0..values.fold(0.1f64, f64::max) * 1.05
    };
    let mut c = chart.build_cartesian_2d(0f64..steps, range).map_err(|e| e.to_string())?;
    if text {
        c.configure_mesh().x_desc("step").y_desc(checks.y_desc).draw().map_err(|e| e.to_string())?;
    }
    let points = checks.points.iter().map(|&(s, a)| (s as f64, a as f64));
    c.draw_series(LineSeries::new(points.clone(), &RED)).map_err(|e| e.to_string())?;
    c.draw_series(points.map(|p| Circle::new(p, 4, RED.filled()))).map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}
