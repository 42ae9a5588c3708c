//! `tcpdoctor completions` and `tcpdoctor man`: each completion script is
//! checked by its own shell's parser, bash's completes a verb and a shell
//! name, and the manual page renders with groff and man without a warning.

mod common;

use common::{require, run_bounded, tcpdoctor};
use std::process::{Command, Output};
use std::time::Duration;

fn tcpdoctor_out(args: &[&str]) -> Output {
    let mut c = tcpdoctor();
    c.args(args);
    run_bounded(c, Duration::from_secs(20)).0
}

fn script(shell: &str) -> String {
    let out = tcpdoctor_out(&["completions", shell]);
    assert!(out.status.success(), "completions {shell}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// Runs `shell args…` with `input` in a file named by the last argument.
fn shell_with_file(shell: &str, args: &[&str], input: &str) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("input");
    std::fs::write(&f, input).unwrap();
    let mut c = Command::new(shell);
    c.args(args).arg(&f);
    run_bounded(c, Duration::from_secs(20)).0
}

/// What bash's completion function offers for the words of `line` (the last one being completed).
fn bash_complete(script: &str, line: &[&str]) -> Vec<String> {
    let words = line.iter().map(|w| format!("'{w}'")).collect::<Vec<_>>().join(" ");
    let n = line.len() - 1;
    let driver = format!(
        "{script}\nCOMP_WORDS=({words}); COMP_CWORD={n}; COMP_LINE='{}'; COMP_POINT=${{#COMP_LINE}}\n\
         _tcpdoctor tcpdoctor '{}' '{}'\nprintf '%s\\n' \"${{COMPREPLY[@]}}\"\n",
        line.join(" "),
        line[n],
        line[n - 1],
    );
    let out = shell_with_file("bash", &["--norc", "--noprofile"], &driver);
    assert!(out.status.success(), "bash: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect()
}

#[test]
fn bash_completion_parses_and_completes_verbs_and_shells() {
    let s = script("bash");
    let out = shell_with_file("bash", &["-n"], &s);
    assert!(out.status.success(), "bash -n: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(bash_complete(&s, &["tcpdoctor", "an"]), ["analyze"]);
    let verbs = bash_complete(&s, &["tcpdoctor", ""]);
    for v in ["analyze", "diagnose", "watch", "completions", "man"] {
        assert!(verbs.iter().any(|w| w == v), "{v} not offered: {verbs:?}");
    }
    let shells = bash_complete(&s, &["tcpdoctor", "completions", ""]);
    for v in ["bash", "zsh", "fish"] {
        assert!(shells.iter().any(|w| w == v), "{v} not offered: {shells:?}");
    }
    let opts = bash_complete(&s, &["tcpdoctor", "watch", "--metr"]);
    assert!(opts.iter().any(|w| w == "--metrics"), "--metrics not offered: {opts:?}");
}

#[test]
fn zsh_and_fish_completions_parse() {
    let zsh = script("zsh");
    assert!(zsh.starts_with("#compdef tcpdoctor"), "zsh script lacks #compdef: {}", &zsh[..zsh.len().min(80)]);
    assert!(zsh.contains("diagnose"));
    if require("zsh") {
        let out = shell_with_file("zsh", &["-n"], &zsh);
        assert!(out.status.success(), "zsh -n: {}", String::from_utf8_lossy(&out.stderr));
    }
    let fish = script("fish");
    assert!(fish.contains("complete -c tcpdoctor"), "fish script: {}", &fish[..fish.len().min(80)]);
    if require("fish") {
        let out = shell_with_file("fish", &["--no-execute"], &fish);
        assert!(out.status.success(), "fish --no-execute: {}", String::from_utf8_lossy(&out.stderr));
    }
}

#[test]
fn completions_for_an_unknown_shell_is_a_usage_error() {
    let out = tcpdoctor_out(&["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid value 'tcsh'"));
}

#[test]
fn man_page_renders_without_warnings_and_covers_every_verb() {
    let out = tcpdoctor_out(&["man"]);
    assert!(out.status.success(), "man: {}", String::from_utf8_lossy(&out.stderr));
    let page = String::from_utf8(out.stdout).expect("UTF-8");
    assert!(page.is_ascii(), "troff input must be ASCII (other characters as \\[uXXXX])");
    if !require("groff") {
        return;
    }
    let out = shell_with_file("groff", &["-man", "-Tutf8", "-ww", "-z"], &page);
    let warnings = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && warnings.is_empty(), "groff: {warnings}");
    if !require("man") {
        return;
    }
    let mut c = Command::new("man");
    c.env("MANWIDTH", "100").env_remove("MAN_KEEP_FORMATTING").env_remove("MANPAGER").env("PAGER", "cat");
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("tcpdoctor.1");
    std::fs::write(&f, &page).unwrap();
    c.arg("-l").arg(&f);
    let (out, _) = run_bounded(c, Duration::from_secs(20));
    // Justified lines: compare with runs of blanks as one space.
    let text = String::from_utf8_lossy(&out.stdout).split_whitespace().collect::<Vec<_>>().join(" ");
    let warnings = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && warnings.is_empty(), "man -l: {warnings}");
    for verb in ["analyze", "bench", "probe", "trace", "inspect", "nodelay", "capture", "diagnose", "lab", "watch"] {
        assert!(text.contains(&format!("tcpdoctor {verb}")), "no section for {verb}");
    }
    for s in ["SYNOPSIS", "COMMANDS", "EXIT STATUS", "--metrics-public", "Exit codes: 0 stopped"] {
        assert!(text.contains(s), "{s} missing from the rendered page");
    }
    // A character outside ASCII reaches the reader as itself.
    assert!(text.contains("PORT+1, \u{2026}"), "the ellipsis did not survive");
}

/// Each verb's own description heads its help and stands beside it in the
/// list (demo's once sat above `completions`, which then showed it instead).
#[test]
fn every_verb_has_its_own_description() {
    let list = String::from_utf8(tcpdoctor_out(&["--help"]).stdout).unwrap();
    for verb in ["analyze", "bench", "diagnose", "demo", "completions", "man", "nodelay", "watch"] {
        let line =
            list.lines().find(|l| l.trim_start().starts_with(&format!("{verb} "))).unwrap_or_else(|| panic!("{list}"));
        assert!(line.split_whitespace().count() > 3, "{verb} has no description: {line:?}");
    }
    let completions = String::from_utf8(tcpdoctor_out(&["completions", "--help"]).stdout).unwrap();
    assert!(completions.starts_with("Print a shell completion script"), "{completions}");
    let demo = String::from_utf8(tcpdoctor_out(&["demo", "--help"]).stdout).unwrap();
    assert!(demo.starts_with("The main job") && demo.contains("--offline analyses"), "{demo}");
}
