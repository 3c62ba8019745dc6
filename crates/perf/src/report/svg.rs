//! Small self-contained SVG line charts (no dependencies): axes with ticks, one polyline and
//! markers per series, a legend.

use std::fmt::Write;

/// One line of a chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// Points (x, y), drawn in the given order.
    pub points: Vec<(f64, f64)>,
    /// Draw the line dashed.
    pub dashed: bool,
}

/// A chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    /// Title.
    pub title: String,
    /// X axis label.
    pub x_label: String,
    /// Y axis label.
    pub y_label: String,
    /// X values are categories: evenly spaced, labelled with their values.
    pub categorical_x: bool,
    /// The lines.
    pub series: Vec<Series>,
}

const W: f64 = 760.0;
const H: f64 = 440.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 190.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;
const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

/// Escapes text for XML.
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A "nice" tick step for a range (1, 2 or 5 times a power of ten).
fn nice_step(range: f64, ticks: f64) -> f64 {
    let raw = (range / ticks).max(f64::MIN_POSITIVE);
    let mag = 10f64.powf(raw.log10().floor());
    let f = raw / mag;
    let nice = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * mag
}

/// Formats a tick value compactly (12k, 1.5M, 0.25).
fn tick_label(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{}M", trim(v / 1e6))
    } else if a >= 1e4 {
        format!("{}k", trim(v / 1e3))
    } else {
        trim(v)
    }
}

fn trim(v: f64) -> String {
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s.is_empty() || s == "-0" {
        "0".into()
    } else {
        s.to_string()
    }
}

impl Chart {
    /// Renders the chart as a standalone SVG document.
    pub fn render(&self) -> String {
        let mut xs: Vec<f64> = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.0))
            .filter(|x| x.is_finite())
            .collect();
        xs.sort_by(f64::total_cmp);
        xs.dedup();
        let ys = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1))
            .filter(|y| y.is_finite());
        let y_max = ys.fold(0.0f64, f64::max);
        let y_step = nice_step(if y_max > 0.0 { y_max } else { 1.0 }, 5.0);
        let y_top = ((y_max / y_step).ceil() * y_step).max(y_step);
        let (x_min, x_max) = match (xs.first(), xs.last()) {
            (Some(a), Some(b)) if b > a => (*a, *b),
            (Some(a), _) => (*a - 1.0, *a + 1.0),
            _ => (0.0, 1.0),
        };
        let pw = W - LEFT - RIGHT;
        let ph = H - TOP - BOTTOM;
        let xpos = |x: f64| -> f64 {
            if self.categorical_x {
                let i = xs.iter().position(|v| *v == x).unwrap_or(0) as f64;
                let n = xs.len().max(1) as f64;
                LEFT + pw * (i + 0.5) / n
            } else {
                LEFT + pw * (x - x_min) / (x_max - x_min)
            }
        };
        let ypos = |y: f64| TOP + ph * (1.0 - y / y_top);

        let mut s = String::new();
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
        let _ = writeln!(
            s,
            r#"<text x="{}" y="22" font-size="15" text-anchor="middle">{}</text>"#,
            LEFT + pw / 2.0,
            escape(&self.title)
        );
        // Y grid and ticks.
        let mut y = 0.0;
        while y <= y_top + y_step / 2.0 {
            let py = ypos(y);
            let _ = writeln!(
                s,
                r##"<line x1="{LEFT}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
                LEFT + pw,
                LEFT - 6.0,
                py + 4.0,
                tick_label(y)
            );
            y += y_step;
        }
        // X ticks.
        let x_ticks: Vec<f64> = if self.categorical_x {
            xs.clone()
        } else {
            let step = nice_step(x_max - x_min, 6.0);
            let mut t = (x_min / step).ceil() * step;
            let mut v = Vec::new();
            while t <= x_max + step / 1000.0 {
                v.push(t);
                t += step;
            }
            v
        };
        for x in x_ticks {
            let px = xpos(x);
            let _ = writeln!(
                s,
                r##"<line x1="{px:.1}" y1="{:.1}" x2="{px:.1}" y2="{:.1}" stroke="#888"/><text x="{px:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
                TOP + ph,
                TOP + ph + 5.0,
                TOP + ph + 19.0,
                tick_label(x)
            );
        }
        let _ = writeln!(
            s,
            r##"<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>"##
        );
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            LEFT + pw / 2.0,
            H - 18.0,
            escape(&self.x_label)
        );
        let _ = writeln!(
            s,
            r#"<text x="18" y="{:.1}" text-anchor="middle" transform="rotate(-90 18 {:.1})">{}</text>"#,
            TOP + ph / 2.0,
            TOP + ph / 2.0,
            escape(&self.y_label)
        );
        for (i, series) in self.series.iter().enumerate() {
            let color = COLORS.get(i % COLORS.len()).copied().unwrap_or("#000");
            let dash = if series.dashed {
                r#" stroke-dasharray="6 4""#
            } else {
                ""
            };
            let pts: Vec<String> = series
                .points
                .iter()
                .filter(|(x, y)| x.is_finite() && y.is_finite())
                .map(|(x, y)| format!("{:.1},{:.1}", xpos(*x), ypos(*y)))
                .collect();
            let _ = writeln!(
                s,
                r#"<polyline fill="none" stroke="{color}" stroke-width="2"{dash} points="{}"/>"#,
                pts.join(" ")
            );
            for p in &pts {
                if let Some((x, y)) = p.split_once(',') {
                    let _ = writeln!(s, r#"<circle cx="{x}" cy="{y}" r="3" fill="{color}"/>"#);
                }
            }
            let ly = TOP + 10.0 + 18.0 * i as f64;
            let lx = W - RIGHT + 12.0;
            let _ = writeln!(
                s,
                r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="2"{dash}/><text x="{}" y="{}">{}</text>"#,
                lx + 22.0,
                lx + 28.0,
                ly + 4.0,
                escape(&series.name)
            );
        }
        s.push_str("</svg>\n");
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_nice() {
        assert_eq!(nice_step(10.0, 5.0), 2.0);
        assert_eq!(nice_step(1234.0, 5.0), 500.0);
        assert_eq!(tick_label(25000.0), "25k");
        assert_eq!(tick_label(0.25), "0.25");
        assert_eq!(tick_label(1_500_000.0), "1.5M");
    }
}
