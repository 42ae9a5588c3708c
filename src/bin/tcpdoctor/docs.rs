//! `tcpdoctor completions SHELL` and `tcpdoctor man`: generated from the
//! command-line definition itself, so they cannot drift from it.

use clap::Command;
use clap_complete::Shell;
use clap_mangen::Man;
use std::io;

/// The shells `completions` knows.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum CompletionShell {
    Bash,
    Zsh,
    Fish,
}

/// The completion script for `shell`.
pub fn completions(mut cmd: Command, shell: CompletionShell) -> String {
    let shell = match shell {
        CompletionShell::Bash => Shell::Bash,
        CompletionShell::Zsh => Shell::Zsh,
        CompletionShell::Fish => Shell::Fish,
    };
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, "tcpdoctor", &mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// The exit codes shared by every command (each command's own list is in its section).
const EXIT_STATUS: &str = "\
0 the command completed (analyze: on all its input).
1 probe: no probe got a TCP answer; trace: the destination did not answer; diagnose: a cause was found.
2 bad command line.
3 no input could be read (missing file, not a capture, unknown host, no such process or interface).
4 analyze: results printed, but part of the input was damaged or skipped.
5 could not measure or capture (a socket call failed, no permission), or nothing was measured.
6 the results could not be written (standard output or an output file failed).";

/// One manual page for the whole command: the top level, then a section per
/// command with its synopsis, options and notes (exit codes included).
pub fn man(cmd: Command) -> io::Result<String> {
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    let top = Man::new(cmd.clone());
    let mut page = Vec::new();
    top.render_title(&mut page)?;
    top.render_name_section(&mut page)?;
    top.render_synopsis_section(&mut page)?;
    top.render_description_section(&mut page)?;
    top.render_options_section(&mut page)?;
    page.extend_from_slice(b".SH COMMANDS\n");
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let m = Man::new(sub.clone());
        let mut part = Vec::new();
        m.render_synopsis_section(&mut part)?;
        m.render_description_section(&mut part)?;
        if sub.get_arguments().any(|a| !a.is_hide_set()) {
            m.render_options_section(&mut part)?;
        }
        if sub.get_after_help().is_some() {
            m.render_extra_section(&mut part)?;
        }
        page.extend_from_slice(format!(".SS \"tcpdoctor {}\"\n", sub.get_name()).as_bytes());
        page.extend_from_slice(demote(&String::from_utf8_lossy(&part)).as_bytes());
    }
    page.extend_from_slice(b".SH \"EXIT STATUS\"\n");
    for line in EXIT_STATUS.lines() {
        let (code, text) = line.split_once(' ').unwrap_or((line, ""));
        page.extend_from_slice(format!(".TP\n\\fB{code}\\fR\n{text}\n").as_bytes());
    }
    top.render_version_section(&mut page)?;
    Ok(ascii(&String::from_utf8_lossy(&page)))
}

/// troff reads bytes, not UTF-8: other characters (`…`, `µ`) go as `\[uXXXX]` escapes.
fn ascii(roff: &str) -> String {
    let mut out = String::with_capacity(roff.len());
    for c in roff.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            out.push_str(&format!("\\[u{:04X}]", c as u32));
        }
    }
    out
}

/// A command's own sections inside its `.SS`: headings become paragraph
/// breaks (options get a label), so the page keeps one level of sections.
fn demote(roff: &str) -> String {
    let mut out = String::with_capacity(roff.len());
    for line in roff.lines() {
        match line {
            ".SH SYNOPSIS" => {}
            ".SH DESCRIPTION" | ".SH EXTRA" => out.push_str(".PP\n"),
            l if l.starts_with(".SH ") => {
                out.push_str(".PP\n\\fB");
                out.push_str(&l[4..].trim_matches('"').to_lowercase());
                out.push_str(":\\fR\n");
            }
            l => {
                out.push_str(l);
                out.push('\n');
            }
        }
    }
    out
}
