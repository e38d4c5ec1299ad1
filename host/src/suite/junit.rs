//! A test run as JUnit XML, the report CI systems read: a `<testsuite>` per test file (named by
//! its path), a `<testcase>` per case with a `<failure>` holding its differences, and an
//! `<error>` for a file that could not be read or whose plugin would not load. Written by hand:
//! the format is a dozen elements, and escaping is all it needs. The crate for it,
//! `quick-junit` (0.8), was weighed and left out: it brings chrono (a second time library
//! beside jiff), quick-xml, strip-ansi-escapes and a second major version of `syn` to compile,
//! for what these sixty lines write; the end-to-end tests read this output with a JUnit parser
//! (junitparser) as CI systems do.

use std::fmt::Write as _;

use super::{TestRun, shown};

/// `run` as JUnit XML.
pub(super) fn render(run: &TestRun) -> String {
    let mut xml = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let total = run.passed() + run.failed();
    let _ = writeln!(
        xml,
        "<testsuites name=\"qhost test\" tests=\"{total}\" failures=\"{}\" errors=\"{}\">",
        run.failed(),
        run.broken()
    );
    for file in &run.files {
        let name = escape(&shown(&file.path));
        let failures = file.cases.iter().filter(|c| !c.passed()).count();
        let errors = usize::from(file.broken.is_some());
        let _ = writeln!(
            xml,
            "  <testsuite name=\"{name}\" tests=\"{}\" failures=\"{failures}\" errors=\"{errors}\" time=\"{:.3}\">",
            file.cases.len() + errors,
            file.took.as_secs_f64()
        );
        for case in &file.cases {
            let _ = write!(
                xml,
                "    <testcase classname=\"{name}\" name=\"{}\" time=\"{:.3}\"",
                escape(&case.name),
                case.took.as_secs_f64()
            );
            if case.passed() {
                xml.push_str("/>\n");
                continue;
            }
            let first = escape(&case.differences[0]);
            let all = escape(&case.differences.join("\n"));
            let _ = write!(
                xml,
                ">\n      <failure message=\"{first}\" type=\"difference\">{all}</failure>\n    </testcase>\n"
            );
        }
        if let Some(why) = &file.broken {
            let why = escape(why);
            let _ = writeln!(
                xml,
                "    <testcase classname=\"{name}\" name=\"(plugin)\">\n      <error message=\"{why}\" type=\"plugin\">{why}</error>\n    </testcase>"
            );
        }
        xml.push_str("  </testsuite>\n");
    }
    for error in &run.errors {
        let why = escape(error);
        let _ = writeln!(
            xml,
            "  <testsuite name=\"(unreadable)\" tests=\"1\" failures=\"0\" errors=\"1\">\n    <testcase classname=\"(unreadable)\" name=\"(test file)\">\n      <error message=\"{why}\" type=\"test-file\">{why}</error>\n    </testcase>\n  </testsuite>"
        );
    }
    xml.push_str("</testsuites>\n");
    xml
}

/// Text as XML character data or an attribute value: the five escapes, and control characters
/// XML 1.0 cannot hold replaced.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' => out.push_str("&#10;"),
            '\t' | '\r' => out.push(' '),
            c if (c as u32) < 0x20 => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::{CaseReport, FileReport};
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_failure_holds_its_differences_escaped() {
        let run = TestRun {
            files: vec![FileReport {
                path: "/x/a.test.toml".into(),
                plugin: "/x/a.wasm".into(),
                broken: None,
                cases: vec![
                    CaseReport {
                        name: "passes".into(),
                        differences: vec![],
                        took: Duration::from_millis(5),
                    },
                    CaseReport {
                        name: "fails <&>".into(),
                        differences: vec!["outcome: expected ack, got reject: \"no\"".into()],
                        took: Duration::ZERO,
                    },
                ],
                took: Duration::from_millis(7),
            }],
            errors: vec![],
        };
        let xml = render(&run);
        assert!(
            xml.contains(
                "<testsuites name=\"qhost test\" tests=\"2\" failures=\"1\" errors=\"0\">"
            ),
            "{xml}"
        );
        assert!(xml.contains("name=\"fails &lt;&amp;&gt;\""), "{xml}");
        assert!(
            xml.contains("<failure message=\"outcome: expected ack, got reject: &quot;no&quot;\" type=\"difference\">"),
            "{xml}"
        );
    }
}
