//! What to change: the software's own knob first, then the generic fixes.

use crate::record::inspect::{Host, Software, Summary, Trace};

/// What to change, from the software's own knob to the generic fix; a
/// write-write-read seen by the trace comes first, as the stall's shape.
pub(super) fn advice(sw: &Software, sum: &Summary, host: &Host, trace: Option<&Trace>) -> Vec<String> {
    let mut a = Vec::new();
    let found = trace.is_some_and(|t| t.found);
    if sum.nagle_on == 0 && !found {
        return a;
    }
    if let Some(t) = trace.filter(|t| t.found && t.kernel_confirms == Some(false)) {
        // The shape, but the kernel saw the pieces leave as written: the application paced them.
        let held = t.kernel_hold.as_ref().map_or(0, |h| h.nagle);
        a.push(format!(
            "the trace saw write-write-read ({} of {} responses on Nagle sockets in small pieces), but the kernel held \
only {held} writes by Nagle: the pieces left the host as they were written, so the time between them is the \
application's own (look at what it does between its writes), not a Nagle stall; Nagle can still stall them when \
the ACK comes late:",
            t.write_write_read, t.nagle_responses
        ));
    } else if let Some(t) = trace.filter(|t| t.found) {
        a.push(format!(
            "the trace saw write-write-read: {} of {} responses on Nagle sockets went out in small pieces, then the \
process waited for the next request{}. This is the shape of the Nagle + delayed-ACK stall: the last piece waits \
for the ACK of the first, which the peer delays ~40 ms. The fix:",
            t.write_write_read,
            t.nagle_responses,
            t.gap_wwr_ms
                .map(|g| format!(" ({g:.1} ms median from the last piece to the next request)"))
                .unwrap_or_default()
        ));
    }
    let knob = match sw.kind {
        "nginx" if sw.nodelay_setting == Some(false) => {
            "set `tcp_nodelay on;` (nginx's default) in the http or server block, then `nginx -s reload`".into()
        }
        "nginx" => "nginx sets TCP_NODELAY only once a connection goes keep-alive; connections still on their \
first request show Nagle on"
            .into(),
        "jdk-httpserver" => "start the JVM with -Dsun.net.httpserver.nodelay=true".into(),
        "java" => "call setTcpNoDelay(true) on accepted sockets (or the framework's TCP_NODELAY option)".into(),
        "python" => "set TCP_NODELAY on accepted sockets: sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1) \
(socketserver: disable_nagle_algorithm = True)"
            .into(),
        "node" => "call socket.setNoDelay(true) (http.createServer({ noDelay: true }))".into(),
        "go" => "the program turns Nagle back on (TCPConn.SetNoDelay(false)); remove that call".into(),
        _ => "set TCP_NODELAY on these sockets (setsockopt IPPROTO_TCP TCP_NODELAY 1)".into(),
    };
    a.push(knob);
    a.push(
        "or write each response in one piece (writev/sendmsg, or a buffered writer flushed once): Nagle stalls only \
a second small write while the first is unacknowledged"
            .into(),
    );
    if let Some(t) = trace.filter(|t| !t.found && t.nagle_responses > 0 && t.nagle_in_pieces_fraction == Some(0.0)) {
        a.push(format!(
            "(the trace saw all {} responses on Nagle sockets written in one piece: Nagle does not stall them as \
they are written now)",
            t.nagle_responses
        ));
    }
    if let Some(c) = host.counters.iter().find(|c| c.name == "DelayedACKs" && c.delta > 0) {
        a.push(format!(
            "this host's delayed-ACK timer fired {} times in the window: a peer here waits ~40 ms for ACKs; \
TCP_QUICKACK after each read or `ip route change … quickack 1` on the ACKing side avoids it",
            c.delta
        ));
    }
    a
}
