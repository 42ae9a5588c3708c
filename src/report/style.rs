//! Colour for a terminal: on only when stdout is one, `NO_COLOR` is unset and
//! `TERM` is not `dumb`; renderers stay plain otherwise (pipes, files, tests).

use std::sync::atomic::{AtomicBool, Ordering};

static ON: AtomicBool = AtomicBool::new(false);

/// Turns colour on if stdout is a terminal that wants it (<https://no-color.org>).
pub fn enable_for_terminal() {
    use std::io::IsTerminal;
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let dumb = std::env::var("TERM").is_ok_and(|t| t == "dumb");
    ON.store(std::io::stdout().is_terminal() && !no_color && !dumb, Ordering::Relaxed);
}

fn paint(code: &str, s: &str) -> String {
    if ON.load(Ordering::Relaxed) { format!("\x1b[{code}m{s}\x1b[0m") } else { s.to_string() }
}

/// A problem: bold red.
pub fn bad(s: &str) -> String {
    paint("1;31", s)
}

/// All is well: bold green.
pub fn good(s: &str) -> String {
    paint("1;32", s)
}

/// Worth a look: yellow.
pub fn warn(s: &str) -> String {
    paint("33", s)
}

/// A heading: bold.
pub fn head(s: &str) -> String {
    paint("1", s)
}
