//! `fabric --html`: one self-contained page (no script, no outside file) drawing the topology
//! once per signal, tier by tier (spines, other switches, leaves, hosts), each link shaded by
//! the share of the QPs crossing it that are bad, the suspects marked, each with its figures on
//! hover; then the verdicts, the suspects and the findings as text.

use std::fmt::Write as _;

use crate::analysis::fabric::{Localization, Role, SuspectKind, Topology, Verdict, findings};

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Grey for a clean link, towards red as the share of bad QPs grows (full at half).
fn shade(rate: f64) -> String {
    let t = (rate * 2.0).clamp(0.0, 1.0);
    let mix = |a: f64, b: f64| (a + (b - a) * t).round() as u8;
    format!(
        "#{:02x}{:02x}{:02x}",
        mix(203.0, 220.0),
        mix(213.0, 38.0),
        mix(225.0, 38.0)
    )
}

const ROWS: [Role; 4] = [Role::Spine, Role::Switch, Role::Leaf, Role::Host];

/// Each node's place: (x, y).
fn layout(topo: &Topology) -> (Vec<(f64, f64)>, f64, f64) {
    let rows: Vec<Vec<usize>> = ROWS
        .iter()
        .map(|r| {
            let mut v: Vec<usize> = (0..topo.nodes.len())
                .filter(|i| topo.nodes[*i].role == *r)
                .collect();
            v.sort_by(|a, b| natural(&topo.nodes[*a].name).cmp(&natural(&topo.nodes[*b].name)));
            v
        })
        .filter(|v| !v.is_empty())
        .collect();
    let widest = rows.iter().map(Vec::len).max().unwrap_or(1);
    let width = (widest as f64 * 16.0 + 80.0).max(900.0);
    let height = rows.len() as f64 * 110.0 + 40.0;
    let mut at = vec![(0.0, 0.0); topo.nodes.len()];
    for (r, row) in rows.iter().enumerate() {
        let step = (width - 80.0) / row.len() as f64;
        for (i, n) in row.iter().enumerate() {
            at[*n] = (40.0 + step * (i as f64 + 0.5), 50.0 + r as f64 * 110.0);
        }
    }
    (at, width, height)
}

/// A name's sort key with its numbers as numbers (h2 before h10).
fn natural(s: &str) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let mut text = String::new();
    let mut num: Option<u64> = None;
    for c in s.chars() {
        match (c.to_digit(10), num) {
            (Some(d), Some(n)) => num = Some(n.saturating_mul(10).saturating_add(u64::from(d))),
            (Some(d), None) => num = Some(u64::from(d)),
            (None, Some(n)) => {
                out.push((std::mem::take(&mut text), n));
                num = None;
                text.push(c);
            }
            (None, None) => text.push(c),
        }
    }
    out.push((text, num.unwrap_or(0)));
    out
}

fn svg(topo: &Topology, l: &Localization, out: &mut String) {
    let (at, width, height) = layout(topo);
    let suspect_links: Vec<u32> = l
        .suspects
        .iter()
        .filter(|s| s.kind == SuspectKind::Link)
        .filter_map(|s| s.link)
        .collect();
    let suspect_nodes: Vec<u32> = l
        .suspects
        .iter()
        .filter(|s| s.kind != SuspectKind::Link)
        .filter_map(|s| s.node)
        .collect();
    let _ = writeln!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{height:.0}\" \
         viewBox=\"0 0 {width:.0} {height:.0}\" class=\"fabric\" data-signal=\"{}\">",
        l.signal.name()
    );
    for (i, link) in topo.links.iter().enumerate() {
        let (a, b) = (at[link.a.node as usize], at[link.b.node as usize]);
        let (qps, bad) = l.link_load.get(i).copied().unwrap_or((0.0, 0.0));
        let rate = if qps > 0.0 { bad / qps } else { 0.0 };
        let suspect = suspect_links.contains(&(i as u32));
        let (class, color, w) = if suspect {
            ("link suspect", "#b91c1c".to_string(), 4.0)
        } else {
            ("link", shade(rate), if qps > 0.0 { 1.6 } else { 0.8 })
        };
        let _ = writeln!(
            out,
            "<line class=\"{class}\" x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" \
             stroke=\"{color}\" stroke-width=\"{w}\"><title>{}: {:.0} of {:.0} QPs crossing it \
             with {} ({:.1}%)</title></line>",
            a.0,
            a.1,
            b.0,
            b.1,
            esc(&topo.link_name(i as u32)),
            bad,
            qps,
            l.signal.name(),
            rate * 100.0
        );
    }
    let hosts = topo.nodes.iter().filter(|n| n.role == Role::Host).count();
    for (i, n) in topo.nodes.iter().enumerate() {
        let (x, y) = at[i];
        let host = n.role == Role::Host;
        let suspect = suspect_nodes.contains(&(i as u32));
        let r = if host { 4.0 } else { 9.0 };
        let fill = if suspect {
            "#b91c1c"
        } else if host {
            "#475569"
        } else {
            "#1e3a8a"
        };
        let class = if suspect { "node suspect" } else { "node" };
        let _ = writeln!(
            out,
            "<circle class=\"{class}\" cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"{r}\" fill=\"{fill}\">\
             <title>{} ({})</title></circle>",
            esc(&n.name),
            n.role.name()
        );
        if !host || hosts <= 64 {
            let dy = if host { 18.0 } else { -14.0 };
            let _ = writeln!(
                out,
                "<text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
                y + dy,
                esc(&n.name)
            );
        }
    }
    out.push_str("</svg>\n");
}

/// The page.
pub fn html(topo: &Topology, runs: &[Localization]) -> String {
    let mut out = String::from(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>roce-observer fabric</title><style>\
         body{font:14px system-ui,sans-serif;margin:24px;color:#0f172a}\
         svg{display:block;border:1px solid #e2e8f0;margin:8px 0 16px;max-width:100%;height:auto}\
         text{font-size:11px;fill:#334155}\
         table{border-collapse:collapse;margin:8px 0 16px}\
         td,th{border:1px solid #e2e8f0;padding:3px 8px;text-align:left}\
         .found{color:#b91c1c}.clean{color:#15803d}.unsure{color:#a16207}\
         </style></head><body>\n<h1>Where in the fabric</h1>\n",
    );
    for l in runs {
        let (class, verdict) = match &l.verdict {
            Verdict::Found => ("found", "found".to_string()),
            Verdict::Clean(why) => ("clean", format!("clean: {why}")),
            Verdict::NotEnoughEvidence(why) => ("unsure", format!("not enough evidence: {why}")),
        };
        let _ = writeln!(
            out,
            "<section class=\"signal\" id=\"{0}\"><h2>{0}</h2>\n<p class=\"{class}\">{1} \
             ({2} QPs weighed, {3} with {0})</p>",
            l.signal.name(),
            esc(&verdict),
            l.qps,
            l.bad_qps
        );
        svg(topo, l, &mut out);
        if !l.suspects.is_empty() {
            out.push_str(
                "<table class=\"suspects\"><tr><th>#</th><th>kind</th><th>suspect</th>\
                 <th>bad QPs crossing it</th><th>share</th><th>elsewhere</th>\
                 <th>bad packets</th><th>placed</th></tr>\n",
            );
            for (i, s) in l.suspects.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.0} of {:.0}</td>\
                     <td>{:.1}%</td><td>{:.2}%</td><td>{}</td><td>{:.0}%</td></tr>",
                    i + 1,
                    s.kind.name(),
                    esc(&s.name),
                    s.bad_qps,
                    s.qps,
                    s.rate * 100.0,
                    s.baseline * 100.0,
                    s.bad_packets,
                    s.placed * 100.0
                );
            }
            out.push_str("</table>\n");
        }
        out.push_str("</section>\n");
    }
    let (findings, checks) = findings(runs);
    out.push_str("<h2>Findings</h2>\n<ul class=\"findings\">\n");
    for f in &findings {
        let _ = writeln!(
            out,
            "<li><b>{}</b> {} [{}]: {}<br>{}</li>",
            f.severity.name().to_uppercase(),
            esc(&f.title),
            esc(&f.rule),
            esc(&f.summary),
            esc(&f.hint)
        );
    }
    for c in &checks {
        let _ = writeln!(
            out,
            "<li>{} {}: {}</li>",
            esc(&c.rule),
            match c.status {
                crate::model::findings::CheckStatus::Fired => "fired",
                crate::model::findings::CheckStatus::Passed => "passed",
                crate::model::findings::CheckStatus::InsufficientData => "insufficient data",
                crate::model::findings::CheckStatus::Skipped => "skipped",
            },
            esc(&c.note)
        );
    }
    out.push_str("</ul>\n</body></html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_sort_with_their_numbers() {
        let mut v = vec!["h10", "h2", "l1", "h1"];
        v.sort_by_key(|s| natural(s));
        assert_eq!(v, ["h1", "h2", "h10", "l1"]);
        assert_eq!(esc("<a & \"b\">"), "&lt;a &amp; &quot;b&quot;&gt;");
        assert_eq!(shade(0.0), "#cbd5e1");
        assert_eq!(shade(0.7), "#dc2626");
    }
}
