//! The console's two pictures, inline SVG (the page's policy allows no image from elsewhere):
//! a queue's sparkline of the last minutes, and its chart of the last hour with a scale.

/// An inline SVG polyline of `points`, scaled to its largest.
pub(super) fn sparkline(points: &[u64]) -> String {
    const W: f64 = 150.0;
    const H: f64 = 24.0;
    if points.len() < 2 {
        return "<span class=\"muted\">sampling…</span>".to_string();
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
    format!(
        "<svg width=\"{W}\" height=\"{H}\" role=\"img\" aria-label=\"messages handled\">\
         <polyline fill=\"none\" stroke=\"#0366d6\" stroke-width=\"1.5\" points=\"{}\"/></svg>",
        line.join(" ")
    )
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
pub(super) fn hour_chart(per_minute: &[u64]) -> String {
    const W: f64 = 480.0;
    const H: f64 = 90.0;
    const LEFT: f64 = 56.0;
    const BOTTOM: f64 = 16.0;
    if per_minute.is_empty() {
        return "<span class=\"muted\">the first minute is under way</span>".to_string();
    }
    let top = nice(per_minute.iter().copied().max().unwrap_or(0).max(1));
    let (plot_w, plot_h) = (W - LEFT, H - BOTTOM - 6.0);
    // One slot per minute and one for the minute under way; the newest bar on the right.
    let slots = crate::admin::history::MINUTES + 1;
    let slot = plot_w / slots as f64;
    let per_minute = &per_minute[per_minute.len().saturating_sub(slots)..];
    let n = per_minute.len();
    let bars: String = (per_minute.iter().enumerate())
        .map(|(i, v)| {
            let h = *v as f64 / top as f64 * plot_h;
            let x = LEFT + (slots - n + i) as f64 * slot;
            format!(
                "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{h:.1}\" fill=\"#0366d6\">\
                 <title>{v} handled, {} min ago</title></rect>",
                6.0 + plot_h - h,
                (slot - 1.0).max(1.0),
                n - 1 - i
            )
        })
        .collect();
    let base = 6.0 + plot_h;
    format!(
        "<svg class=\"hour\" width=\"{W}\" height=\"{H}\" role=\"img\" \
         aria-label=\"messages handled per minute, last hour\">\
         <text x=\"{lx}\" y=\"12\" text-anchor=\"end\" font-size=\"10\">{top}/min</text>\
         <text x=\"{lx}\" y=\"{base}\" text-anchor=\"end\" font-size=\"10\">0</text>\
         <line x1=\"{LEFT}\" y1=\"6\" x2=\"{LEFT}\" y2=\"{base}\" stroke=\"#999\"/>\
         <line x1=\"{LEFT}\" y1=\"{base}\" x2=\"{W}\" y2=\"{base}\" stroke=\"#999\"/>\
         <line x1=\"{LEFT}\" y1=\"6\" x2=\"{W}\" y2=\"6\" stroke=\"#eee\"/>{bars}\
         <text x=\"{LEFT}\" y=\"{H}\" font-size=\"10\">60 min ago</text>\
         <text x=\"{mid}\" y=\"{H}\" text-anchor=\"middle\" font-size=\"10\">30</text>\
         <text x=\"{W}\" y=\"{H}\" text-anchor=\"end\" font-size=\"10\">now</text></svg>",
        lx = LEFT - 4.0,
        mid = LEFT + plot_w / 2.0,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sparkline_scales_to_its_largest_point() {
        assert!(sparkline(&[3]).contains("sampling"));
        let svg = sparkline(&[0, 5, 10]);
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
        let svg = hour_chart(&[3, 40, 7]);
        assert!(svg.contains(">50/min<") && svg.contains(">now<"), "{svg}");
        assert_eq!(svg.matches("<rect").count(), 3, "{svg}");
        assert!(svg.contains("40 handled, 1 min ago"), "{svg}");
        assert!(hour_chart(&[]).contains("under way"));
    }
}
