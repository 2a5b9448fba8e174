//! HTML escaping for every server-supplied value (spec DASH-04).

use std::fmt::{self, Display, Write};

/// Escapes `& < > " '` so the text is safe both as element content and as a
/// quoted attribute value.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + s.len() / 8);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Escaping wrapper for `format!`: `format!("<td>{}</td>", E(&text))`.
pub struct E<'a, T: Display + ?Sized>(pub &'a T);

impl<T: Display + ?Sized> Display for E<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut raw = String::new();
        write!(raw, "{}", self.0)?;
        f.write_str(&escape(&raw))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_the_five_characters() {
        assert_eq!(
            escape(r#"<script>alert("x") & 'y'</script>"#),
            "&lt;script&gt;alert(&quot;x&quot;) &amp; &#39;y&#39;&lt;/script&gt;"
        );
        assert_eq!(escape("plain lap 3"), "plain lap 3");
        assert_eq!(escape(""), "");
        assert_eq!(format!("{}", E("<b>é</b>")), "&lt;b&gt;é&lt;/b&gt;");
    }

    #[test]
    fn attribute_breakouts_are_neutralised() {
        let hostile = r#"" onmouseover="window.__pwned=1" x=""#;
        let e = escape(hostile);
        assert!(!e.contains('"'));
        assert!(!e.contains('<'));
        let hostile = "' onerror='x";
        assert!(!escape(hostile).contains('\''));
    }
}
