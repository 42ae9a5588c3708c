//! Text fits the terminal when standard output is one: commands run on a
//! real pseudo-terminal of 80 columns (openpty) print no line over 80; the
//! same commands into a pipe keep their full lines.

mod common;

use nix::pty::{Winsize, openpty};
use std::io::Read;
use std::process::Stdio;
use std::time::Duration;

/// `tcpdoctor ARGS` with standard output on an 80-column pty: what it printed, lines without CR.
fn on_pty(args: &[&str]) -> String {
    let size = Winsize { ws_row: 24, ws_col: 80, ws_xpixel: 0, ws_ypixel: 0 };
    let pty = openpty(Some(&size), None).unwrap();
    let mut c = common::tcpdoctor();
    c.args(args).stdin(Stdio::null()).stderr(Stdio::null()).stdout(Stdio::from(pty.slave));
    let mut child = c.spawn().unwrap();
    // The child holds the only slave end now: the master reads EIO when it exits.
    drop(c);
    let pid = child.id();
    let reader = std::thread::spawn(move || {
        let mut master = std::fs::File::from(pty.master);
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match master.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
        out
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            // SAFETY: kill(2) on the PID of the child this test started.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            panic!("{args:?} still running after 60 s; killed");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    String::from_utf8_lossy(&reader.join().unwrap()).replace('\r', "")
}

/// `text` with its colour codes (`ESC [ … letter`) left out.
fn without_codes(text: &str) -> String {
    let mut s = String::new();
    let mut esc = false;
    for ch in text.chars() {
        match (esc, ch) {
            (false, '\x1b') => esc = true,
            (true, c) if c.is_ascii_alphabetic() => esc = false,
            (true, _) => {}
            (false, c) => s.push(c),
        }
    }
    s
}

/// Columns a line takes: characters, colour codes left out.
fn columns(line: &str) -> usize {
    without_codes(line).chars().count()
}

/// The printed characters other than white space, colour codes left out.
fn visible(text: &str) -> String {
    without_codes(text).chars().filter(|c| !c.is_whitespace()).collect()
}

fn widest(text: &str) -> usize {
    text.lines().map(columns).max().unwrap_or(0)
}

#[test]
fn text_fits_80_columns_on_a_terminal_and_pipes_get_full_lines() {
    let nagle = common::data("wwr_nagle.pcap").display().to_string();
    for args in [vec!["analyze", nagle.as_str()], vec!["demo", "--offline"]] {
        let out = common::tcpdoctor().args(&args).output().unwrap();
        let piped = String::from_utf8(out.stdout).unwrap();
        assert!(widest(&piped) > 80, "{args:?}: a pipe gets the full lines (some over 80)");
        let tty = on_pty(&args);
        assert!(tty.contains("VERDICT"), "{args:?}: {tty}");
        let over: Vec<&str> = tty.lines().filter(|l| columns(l) > 80).collect();
        assert!(over.is_empty(), "{args:?}: lines over 80 columns on an 80-column terminal: {over:#?}");
        // Nothing lost: the same characters in the same order, spaces and colour codes aside.
        assert_eq!(visible(&tty), visible(&piped), "{args:?}");
    }
}
