//! Text output fitted to the terminal: a line wider than the terminal is
//! wrapped at word boundaries, its continuation indented under its text
//! (past a `* ` bullet), so verdicts and fixes stay readable. Pipes and files
//! get the full lines (the caller only fits when standard output is a terminal).

use std::io::IsTerminal;

/// The terminal's width when standard output is one.
pub fn stdout_width() -> Option<usize> {
    std::io::stdout().is_terminal().then(textwrap::termwidth).filter(|w| *w >= 20)
}

/// `text` with every line at most `width` columns (colour codes take none).
pub fn fit(text: &str, width: usize) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 16);
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        if textwrap::core::display_width(line) <= width {
            out.push_str(line);
            continue;
        }
        let body = line.trim_start_matches(' ');
        let lead = &line[..line.len() - body.len()];
        // Continuation lines start under the text, past a bullet or a label.
        let hang = if body.starts_with("* ") || body.starts_with("- ") { 2 } else { 2.min(width / 4) };
        let indent = format!("{lead}{}", " ".repeat(hang));
        let (first, rest) = if lead.len() + hang < width / 2 { (lead, indent.as_str()) } else { ("", "") };
        let o = textwrap::Options::new(width).initial_indent(first).subsequent_indent(rest);
        out.push_str(&textwrap::fill(body, o));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lines_wrap_under_their_text_and_short_ones_stay() {
        let verdict = format!("  * Nagle + delayed ACK: {}", "word ".repeat(40));
        let text = format!("VERDICT\n{verdict}\nshort\n");
        let f = fit(&text, 80);
        assert!(f.lines().all(|l| l.chars().count() <= 80), "{f}");
        let lines: Vec<&str> = f.lines().collect();
        assert_eq!(lines[0], "VERDICT");
        assert!(lines[1].starts_with("  * Nagle"));
        assert!(lines[2].starts_with("    word"), "continuation under the text: {f}");
        assert_eq!(*lines.last().unwrap(), "short");
        assert!(f.ends_with("short\n"));
        assert_eq!(f.replace('\n', " ").split_whitespace().count(), text.split_whitespace().count());
        // A word longer than the line is cut, never left over the width.
        let url = format!("see http://example.test/{}", "x".repeat(120));
        assert!(fit(&url, 40).lines().all(|l| l.chars().count() <= 40));
        // Colour codes take no columns.
        let red = format!("\x1b[31m{}\x1b[0m", "y".repeat(70));
        assert_eq!(fit(&red, 80), red);
    }
}
