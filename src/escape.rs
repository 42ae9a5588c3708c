//! Text from the network or from other processes (a `Server:` header, a
//! process's name or command line, a helper's error output) may hold control
//! characters that a terminal obeys: `ESC ] 0 ; … BEL` retitles the window,
//! `ESC [ 2 J` clears it, a carriage return overwrites a line, a bidi override
//! reorders what is read. Text output shows them as escapes instead.
//!
//! Three layers: [`clean`] where such a string enters a sentence or a table,
//! [`terminal`] over every text output as a backstop (only this program's own
//! colour sequences pass; [`document`] is the same for the HTML reports, where
//! none do), and [`json`] over JSON output (serde_json already escapes C0; C1
//! and bidi controls are escaped too, which keeps it valid JSON).
//! Producers use [`clean`] for the sentences they put in records, renderers
//! for their tables, whoever writes output the other two: one definition of a
//! control character for all of them, so none of them owns it.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Characters a terminal may act on, beyond printing a glyph: C0 (with tab
/// and newline), DEL, C1, and the Unicode bidi and line/paragraph controls.
fn is_control(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{2028}' | '\u{2029}')
        || ('\u{202a}'..='\u{202e}').contains(&c)
        || ('\u{2066}'..='\u{2069}').contains(&c)
}

fn push_escaped(out: &mut String, c: char) {
    let n = u32::from(c);
    if n < 0x100 {
        let _ = write!(out, "\\x{n:02x}");
    } else {
        let _ = write!(out, "\\u{{{n:04x}}}");
    }
}

/// A foreign string with every control character (tab and newline too: the
/// string is one field of a line) written as `\x1b` or `\u{202e}`.
pub fn clean(s: &str) -> Cow<'_, str> {
    if !s.chars().any(is_control) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if is_control(c) {
            push_escaped(&mut out, c);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// The colour sequences [`crate::report::style`] writes; nothing else may reach a terminal raw.
const OWN_SGR: [&str; 5] = ["\x1b[0m", "\x1b[1m", "\x1b[33m", "\x1b[1;31m", "\x1b[1;32m"];

/// Text output as a terminal may see it: newlines and tabs kept, this
/// program's own colour sequences kept, every other control character escaped.
pub fn terminal(s: &str) -> Cow<'_, str> {
    lines(s, &OWN_SGR)
}

/// A document written to a file (the `--html` reports): newlines and tabs
/// kept, every other control character escaped. The document of its own
/// holds none, so a browser shows the same page, and `cat` or `less -R` of
/// the file obeys nothing a server sent.
pub fn document(s: &str) -> Cow<'_, str> {
    lines(s, &[])
}

/// `s` with every control character but newline and tab escaped, except the sequences in `keep`.
fn lines<'s>(s: &'s str, keep: &[&str]) -> Cow<'s, str> {
    let kept = |at: &str| keep.iter().find(|q| at.starts_with(**q)).copied();
    let bad = |(i, c): (usize, char)| is_control(c) && c != '\n' && c != '\t' && kept(&s[i..]).is_none();
    if !s.char_indices().any(bad) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    let mut rest = s;
    while let Some(c) = rest.chars().next() {
        if let Some(q) = kept(rest) {
            out.push_str(q);
            rest = &rest[q.len()..];
            continue;
        }
        if is_control(c) && c != '\n' && c != '\t' {
            push_escaped(&mut out, c);
        } else {
            out.push(c);
        }
        rest = &rest[c.len_utf8()..];
    }
    Cow::Owned(out)
}

/// JSON text with C1 and bidi controls written as `\uXXXX`. Outside strings
/// JSON holds only ASCII, so every such character is inside a string, where
/// the escape means the same character: the document's meaning is unchanged.
pub fn json(s: &str) -> Cow<'_, str> {
    // Only non-ASCII characters are escaped here, and a report is nearly
    // always ASCII: one quick test of its bytes instead of a look at each
    // character (~30 instructions a byte, most of the report's output time).
    let escaped = |c: char| !c.is_ascii() && is_control(c);
    if s.is_ascii() || !s.chars().any(escaped) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if escaped(c) {
            let _ = write!(out, "\\u{:04x}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOSTILE: &str = "x\x1b]0;TITLE\x07\x1b[2J\r\u{9b}31m\u{202e}gnp.exe\n";

    #[test]
    fn foreign_strings_show_every_control_character() {
        assert_eq!(clean("nginx/1.22.1"), "nginx/1.22.1");
        assert!(matches!(clean("nginx/1.22.1"), Cow::Borrowed(_)));
        assert_eq!(clean(HOSTILE), "x\\x1b]0;TITLE\\x07\\x1b[2J\\x0d\\x9b31m\\u{202e}gnp.exe\\x0a");
        // Our own colour sequences are control characters too, in a foreign string.
        assert_eq!(clean("\x1b[1;31m"), "\\x1b[1;31m");
    }

    #[test]
    fn terminal_output_keeps_lines_tabs_and_our_colours_only() {
        let ours = format!("{}\tok\n", OWN_SGR.concat());
        assert_eq!(terminal(&ours), ours);
        let t = terminal(HOSTILE);
        assert_eq!(t, "x\\x1b]0;TITLE\\x07\\x1b[2J\\x0d\\x9b31m\\u{202e}gnp.exe\n");
        assert!(!t.chars().any(|c| is_control(c) && c != '\n'), "{t:?}");
        // A sequence that only starts like ours is escaped.
        assert_eq!(terminal("\x1b[1;3m"), "\\x1b[1;3m");
    }

    #[test]
    fn a_document_keeps_lines_and_tabs_only() {
        assert_eq!(document("<p>\tok</p>\n"), "<p>\tok</p>\n");
        assert_eq!(document(HOSTILE), "x\\x1b]0;TITLE\\x07\\x1b[2J\\x0d\\x9b31m\\u{202e}gnp.exe\n");
        // Not even our colours: a report file holds none.
        assert_eq!(document("\x1b[1;31m"), "\\x1b[1;31m");
    }

    #[test]
    fn json_stays_json_with_the_same_meaning() {
        let raw = serde_json::to_string(&serde_json::json!({ "server": HOSTILE })).unwrap();
        let safe = json(&raw);
        assert!(!safe.chars().any(is_control), "{safe}");
        let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
        assert_eq!(back["server"], HOSTILE);
        // Plain ASCII, and text whose only non-ASCII characters print, pass as they are.
        for plain in [r#"{"server":"nginx"}"#, r#"{"server":"café ✓"}"#] {
            assert!(matches!(json(plain), Cow::Borrowed(p) if p == plain));
        }
    }
}
