//! Where the binary can run: the newest glibc symbol version it needs. RHEL 9
//! and Amazon Linux 2023 ship glibc 2.34, so nothing may need more (libc's
//! wrappers for newer calls, e.g. epoll_pwait2 at 2.35 or pidfd_* at 2.36, go
//! through syscall(2) instead).

mod common;

use std::process::Command;

/// The newest glibc the distributions we support ship.
const FLOOR: (u32, u32) = (2, 34);

/// (version, symbol) for every versioned glibc symbol `objdump -T` lists.
fn glibc_symbols(text: &str) -> Vec<((u32, u32), String)> {
    text.lines()
        .filter_map(|line| {
            let at = line.find("GLIBC_")?;
            let rest = &line[at + "GLIBC_".len()..];
            let end = rest.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(rest.len());
            let mut parts = rest[..end].split('.').map(|p| p.parse::<u32>().ok());
            let version = (parts.next()??, parts.next()??);
            let symbol = line.split_whitespace().last()?.to_string();
            Some((version, symbol))
        })
        .collect()
}

#[test]
fn the_parser_reads_objdump_lines() {
    let text = "0000000000000000      DF *UND*\t0000000000000000 (GLIBC_2.35) epoll_pwait2\n\
                0000000000000000  w   DF *UND*\t0000000000000000 (GLIBC_2.2.5) __cxa_finalize\n\
                0000000000000000      DF *UND*\t0000000000000000  Base        foo\n";
    assert_eq!(glibc_symbols(text), [((2, 35), "epoll_pwait2".into()), ((2, 2), "__cxa_finalize".into())]);
}

#[test]
fn the_binary_needs_no_glibc_newer_than_2_34() {
    if !common::require("objdump") {
        return;
    }
    let out = Command::new("objdump").arg("-T").arg(env!("CARGO_BIN_EXE_tcpdoctor")).output().unwrap();
    assert!(out.status.success(), "objdump: {}", String::from_utf8_lossy(&out.stderr));
    let symbols = glibc_symbols(&String::from_utf8_lossy(&out.stdout));
    assert!(symbols.len() > 20, "no glibc symbols read: {symbols:?}");
    let newer: Vec<_> = symbols.iter().filter(|(v, _)| *v > FLOOR).collect();
    assert!(newer.is_empty(), "symbols needing glibc > {}.{}: {newer:?}", FLOOR.0, FLOOR.1);
}
