//! The console's two pictures, inline SVG (the page's policy allows no image from elsewhere):
//! a queue's sparkline of the last minutes, and its chart of the last hour with a scale.

use maud::{Markup, html};

/// An inline SVG polyline of `points`, scaled to its largest.
pub(super) fn sparkline(points: &[u64]) -> Markup {
    const W: f64 = 150.0;
    const H: f64 = 24.0;
    if points.len() < 2 {
        return html! { span.muted { "sampling…" } };
    }
    let top = points.iter().copied().max().unwrap_or(0).max(1) as f64;
    let step = W / (points.len() - 1) as f64;
    let line: Vec<String> = (points.iter().enumerate())
        .map(|(i, p)| {
            format!(
                "{:.1},{:.1}",
                i as f64 * step,
                H - *p as f64 / top * (H - 2.0) - 1.0
            )
        })
        .collect();
    html! {
        svg width=(W) height=(H) role="img" aria-label="messages handled" {
            polyline fill="none" stroke="#0366d6" stroke-width="1.5" points=(line.join(" ")) {}
        }
    }
}

/// The largest value the scale shows for `top`: 1, 2 or 5 times a power of ten.
fn nice(top: u64) -> u64 {
    let mut unit = 1;
    loop {
        for m in [1, 2, 5] {
            if m * unit >= top {
                return m * unit;
            }
        }
        unit *= 10;
    }
}

/// A bar per minute of `per_minute` (oldest first, the minute under way last), on a scale
/// from 0 to a round number, with the minutes' ages under it.
pub(super) fn hour_chart(per_minute: &[u64]) -> Markup {
    const W: f64 = 480.0;
    const H: f64 = 90.0;
    const LEFT: f64 = 56.0;
    const BOTTOM: f64 = 16.0;
    if per_minute.is_empty() {
        return html! { span.muted { "the first minute is under way" } };
    }
    let top = nice(per_minute.iter().copied().max().unwrap_or(0).max(1));
    let (plot_w, plot_h) = (W - LEFT, H - BOTTOM - 6.0);
    // One slot per minute and one for the minute under way; the newest bar on the right.
    let slots = crate::admin::history::MINUTES + 1;
    let slot = plot_w / slots as f64;
    let per_minute = &per_minute[per_minute.len().saturating_sub(slots)..];
    let n = per_minute.len();
    let base = 6.0 + plot_h;
    let (lx, mid) = (LEFT - 4.0, LEFT + plot_w / 2.0);
    html! {
        svg.hour width=(W) height=(H) role="img" aria-label="messages handled per minute, last hour" {
            text x=(lx) y="12" text-anchor="end" font-size="10" { (top) "/min" }
            text x=(lx) y=(base) text-anchor="end" font-size="10" { "0" }
            line x1=(LEFT) y1="6" x2=(LEFT) y2=(base) stroke="#999" {}
            line x1=(LEFT) y1=(base) x2=(W) y2=(base) stroke="#999" {}
            line x1=(LEFT) y1="6" x2=(W) y2="6" stroke="#eee" {}
            @for (i, v) in per_minute.iter().enumerate() {
                @let h = *v as f64 / top as f64 * plot_h;
                @let x = LEFT + (slots - n + i) as f64 * slot;
                rect x=(one(x)) y=(one(6.0 + plot_h - h)) width=(one((slot - 1.0).max(1.0)))
                    height=(one(h)) fill="#0366d6" {
                    title { (v) " handled, " (n - 1 - i) " min ago" }
                }
            }
            text x=(LEFT) y=(H) font-size="10" { "60 min ago" }
            text x=(mid) y=(H) text-anchor="middle" font-size="10" { "30" }
            text x=(W) y=(H) text-anchor="end" font-size="10" { "now" }
        }
    }
}

/// A coordinate to a tenth.
fn one(v: f64) -> String {
    format!("{v:.1}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sparkline_scales_to_its_largest_point() {
        assert!(sparkline(&[3]).into_string().contains("sampling"));
        let svg = sparkline(&[0, 5, 10]).into_string();
        assert!(
            svg.contains("points=\"0.0,23.0 75.0,12.0 150.0,1.0\""),
            "{svg}"
        );
    }

    #[test]
    fn the_hour_s_scale_is_a_round_number_above_the_largest_minute() {
        assert_eq!(
            (nice(1), nice(3), nice(7), nice(10), nice(11), nice(4_200)),
            (1, 5, 10, 10, 20, 5_000)
        );
        let svg = hour_chart(&[3, 40, 7]).into_string();
        assert!(svg.contains(">50/min<") && svg.contains(">now<"), "{svg}");
        assert_eq!(svg.matches("<rect").count(), 3, "{svg}");
        assert!(svg.contains("40 handled, 1 min ago"), "{svg}");
        assert!(hour_chart(&[]).into_string().contains("under way"));
    }
}
