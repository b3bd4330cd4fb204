//! The `--html` report: one self-contained page that works offline.
//!
//! Everything is inline: uPlot (vendored in `observer-core/assets/`, MIT), its stylesheet, the page's
//! own CSS and script, and the report itself as JSON in a `<script type="application/json">`
//! block. A Content-Security-Policy forbids every fetch. The page script builds the DOM from the
//! JSON with DOM APIs only (text nodes, never markup), so strings taken from packets or files
//! cannot inject anything.
//!
//! For tests and for humans, the page reports its own failures: errors (and unhandled promise
//! rejections) go to a visible `<pre id="errors">` and set `body[data-errors]` to their count;
//! once rendered, `body[data-charts]` holds the number of charts made and `body[data-rendered]`
//! is "1".

use crate::model::Report;

/// uPlot 1.6.32 (<https://github.com/leeoniya/uPlot>, MIT: `observer-core/assets/uPlot.LICENSE`).
const UPLOT_JS: &str = include_str!("../../../assets/uPlot.iife.min.js");
const UPLOT_CSS: &str = include_str!("../../../assets/uPlot.min.css");

// Inline elements end at the first `</script` or `</style`, whatever the context.
const _: () = assert!(!contains_ascii_ci(UPLOT_JS.as_bytes(), b"</script"));
const _: () = assert!(!contains_ascii_ci(UPLOT_JS.as_bytes(), b"<!--"));
const _: () = assert!(!contains_ascii_ci(UPLOT_CSS.as_bytes(), b"</style"));
const _: () = assert!(!contains_ascii_ci(PAGE_JS.as_bytes(), b"</script"));
const _: () = assert!(!contains_ascii_ci(PAGE_JS.as_bytes(), b"<!--"));
const _: () = assert!(!contains_ascii_ci(ERRORS_JS.as_bytes(), b"</script"));
const _: () = assert!(!contains_ascii_ci(PAGE_CSS.as_bytes(), b"</style"));

/// Whether `needle` (lowercase ASCII) occurs in `hay`, ignoring ASCII case.
const fn contains_ascii_ci(hay: &[u8], needle: &[u8]) -> bool {
    if needle.len() > hay.len() {
        return false;
    }
    let mut i = 0;
    while i + needle.len() <= hay.len() {
        let mut j = 0;
        while j < needle.len() && hay[i + j].to_ascii_lowercase() == needle[j] {
            j += 1;
        }
        if j == needle.len() {
            return true;
        }
        i += 1;
    }
    false
}

/// The report as JSON that is safe inside a `<script>` element: `<` (so `</script>` and `<!--`)
/// and U+2028 / U+2029 are written as `\u` escapes. All of them can only occur inside JSON
/// strings, where the escapes mean the same characters.
fn script_json(report: &Report) -> String {
    let json = serde_json::to_string(report).unwrap_or_else(|e| {
        // The page shows this instead of the report (it cannot happen with today's types).
        serde_json::json!({ "error": e.to_string() }).to_string()
    });
    let mut out = String::with_capacity(json.len() + 64);
    for c in json.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out
}

/// The report as a self-contained HTML page.
pub fn render(report: &Report) -> String {
    let json = script_json(report);
    let mut page = String::with_capacity(
        UPLOT_JS.len() + UPLOT_CSS.len() + PAGE_JS.len() + PAGE_CSS.len() + json.len() + 2048,
    );
    page.push_str(concat!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n",
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; ",
        "script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:\">\n",
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n",
        "<meta name=\"generator\" content=\"roce-observer\">\n",
        "<title>RoCEv2 diagnosis</title>\n<style>\n",
    ));
    page.push_str(UPLOT_CSS);
    page.push_str("\n</style>\n<style>\n");
    page.push_str(PAGE_CSS);
    page.push_str("</style>\n</head>\n<body>\n<pre id=\"errors\" hidden></pre>\n<script>\n");
    page.push_str(ERRORS_JS);
    page.push_str("</script>\n<script>\n");
    page.push_str(UPLOT_JS);
    page.push_str("\n</script>\n<script type=\"application/json\" id=\"report\">");
    page.push_str(&json);
    page.push_str(concat!(
        "</script>\n<main id=\"page\">\n<noscript><p>This report is drawn by JavaScript, which ",
        "is disabled. The report's JSON is in the page source (script id=\"report\").</p>",
        "</noscript>\n</main>\n<script>\n",
    ));
    page.push_str(PAGE_JS);
    page.push_str("</script>\n</body>\n</html>\n");
    page
}

/// Installed before anything else runs: every error becomes visible and countable.
const ERRORS_JS: &str = include_str!("errors.js");

const PAGE_CSS: &str = include_str!("page.css");

/// Builds the page from the JSON report.
const PAGE_JS: &str = include_str!("page.js");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_json_cannot_end_its_element() {
        let mut r = crate::aggregate::Aggregate::new().report(
            crate::model::Source::pcap(
                vec!["a</script><script>alert(1)</script>\u{2028}<!--".into()],
                Vec::new(),
            ),
            1.0,
        );
        r.window.seconds = 2.0;
        let json = script_json(&r);
        assert!(!json.contains('<'), "{json}");
        assert!(!json.contains('\u{2028}'), "{json}");
        let back: Report = serde_json::from_str(&json).unwrap();
        assert_eq!(back, r);
        let page = render(&r);
        assert_eq!(
            page.matches("</script").count(),
            4,
            "only the page's own four"
        );
        assert!(!page.contains("http://") && !page.contains(" src="));
    }

    #[test]
    fn needle_search_ignores_case() {
        assert!(contains_ascii_ci(b"a</SCRIPT>", b"</script"));
        assert!(!contains_ascii_ci(b"</scrip", b"</script"));
    }
}
