//! A helper command run with a deadline: its output captured (at most
//! [`MAX_OUTPUT`] a stream), the child killed by its PID when late. A child
//! that leaves a background process holding its output open cannot hold us
//! past the deadline either.

use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::process::{ChildStderr, ChildStdout, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Most bytes kept of stdout or of stderr (a big `nginx -T` is a few MB).
pub(crate) const MAX_OUTPUT: usize = 16 << 20;

/// One captured stream; None once it reached end of file.
enum Pipe {
    Out(ChildStdout),
    Err(ChildStderr),
}

impl Pipe {
    fn fd(&self) -> i32 {
        match self {
            Pipe::Out(p) => p.as_raw_fd(),
            Pipe::Err(p) => p.as_raw_fd(),
        }
    }

    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Pipe::Out(p) => p.read(buf),
            Pipe::Err(p) => p.read(buf),
        }
    }
}

/// Runs `cmd` with stdin from /dev/null and its output captured; it is killed
/// after `limit`, or when it prints more than [`MAX_OUTPUT`] on a stream.
pub(crate) fn run_bounded(cmd: &mut Command, limit: Duration) -> io::Result<(ExitStatus, String, String)> {
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let until = Instant::now() + limit;
    let mut child = cmd.spawn()?;
    let mut pipes = [child.stdout.take().map(Pipe::Out), child.stderr.take().map(Pipe::Err)];
    let mut bufs = [Vec::new(), Vec::new()];
    let mut status = None;
    let mut chunk = vec![0u8; 64 << 10];
    let end = loop {
        if status.is_none() {
            status = child.try_wait()?;
        }
        let open: Vec<usize> = (0..2).filter(|&i| pipes[i].is_some()).collect();
        if open.is_empty() && status.is_some() {
            break Ok(());
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            // Exited, but something it left behind still holds its output open: what it printed is all here.
            if status.is_some() {
                break Ok(());
            }
            let why = format!("no answer within {} s", limit.as_secs_f64());
            break Err(io::Error::new(io::ErrorKind::TimedOut, why));
        }
        // While the child runs, look at it every 10 ms; after, wait only for the pipes.
        let wait = if status.is_none() { left.min(Duration::from_millis(10)) } else { left };
        let mut fds: Vec<libc::pollfd> = open
            .iter()
            .map(|&i| libc::pollfd { fd: pipes[i].as_ref().map_or(-1, Pipe::fd), events: libc::POLLIN, revents: 0 })
            .collect();
        if fds.is_empty() {
            std::thread::sleep(wait);
            continue;
        }
        // SAFETY: `fds` is a live array of pollfds of the given length.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, wait.as_millis().max(1) as i32) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            break Err(e);
        }
        let mut too_big = false;
        for (k, &i) in open.iter().enumerate() {
            if fds[k].revents == 0 {
                continue;
            }
            let Some(p) = pipes[i].as_mut() else { continue };
            match p.read(&mut chunk) {
                Ok(0) => pipes[i] = None,
                Ok(got) => {
                    bufs[i].extend_from_slice(&chunk[..got]);
                    too_big |= bufs[i].len() > MAX_OUTPUT;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => pipes[i] = None,
            }
        }
        if too_big {
            break Err(io::Error::other(format!("printed more than {} MiB", MAX_OUTPUT >> 20)));
        }
    };
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    match (end, status) {
        (Ok(()), Some(st)) => Ok((st, text(&bufs[0]), text(&bufs[1]))),
        (end, st) => {
            // Not reaped yet, so the PID is still this child's.
            if st.is_none() {
                let _ = child.kill();
                let _ = child.wait();
            }
            Err(end.err().unwrap_or_else(|| io::Error::other("the command ended without an exit status")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_commands_are_killed() {
        let (st, out, _) = run_bounded(Command::new("echo").arg("hi"), Duration::from_secs(5)).unwrap();
        assert!(st.success() && out == "hi\n");
        let t = Instant::now();
        let e = run_bounded(Command::new("sleep").arg("5"), Duration::from_millis(200)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(t.elapsed() < Duration::from_secs(3));
    }

    /// A child that exits but leaves a background process holding its stdout:
    /// the output it printed comes back at the deadline, not when the other one ends.
    #[test]
    fn a_leftover_holding_the_output_cannot_hold_us() {
        let t = Instant::now();
        let (st, out, _) =
            run_bounded(Command::new("sh").args(["-c", "sleep 6 & echo $!"]), Duration::from_millis(500)).unwrap();
        let waited = t.elapsed();
        let sleeper: i32 = out.trim().parse().unwrap();
        // SAFETY: kill(2) on the PID of the `sleep` this test started, still running (6 s have not passed).
        unsafe { libc::kill(sleeper, libc::SIGKILL) };
        assert!(st.success());
        assert!(waited < Duration::from_secs(3), "waited {waited:?} for a process that was not the command");
    }

    #[test]
    fn output_is_bounded() {
        let e = run_bounded(&mut Command::new("yes"), Duration::from_secs(20)).unwrap_err();
        assert!(e.to_string().contains("printed more than 16 MiB"), "{e}");
    }
}
