//! Settling a handshake-less connection's roles as its data shows them
//! (the evidence is weighed in [`crate::tcp::roles`]).

use super::{Conn, Sink};
use crate::tcp::book::Book;
use crate::tcp::roles::sender_of;
use crate::tcp::{RoleSource, RolesDoubt, Side};
use crate::wire::{Endpoint, Segment};

/// Payload segments on which a connection whose roles are only the
/// lower-port guess looks for evidence again (other connections may have
/// named a server meanwhile, a later message may be a request line).
const GUESS_CHECKS: u8 = 16;

/// How far a connection's roles are settled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Settle {
    /// From the handshake, or from every look the evidence gets.
    Done,
    /// No payload yet: a first judgement from endpoints and ports.
    Open,
    /// Decided on the first payload, sent by this endpoint; the other
    /// direction's first payload may still confirm or correct it.
    Once(Endpoint),
    /// Only the lower-port guess so far: this many more payload segments are looked at.
    Guess(u8),
}

impl<T: Default> Conn<T> {
    /// Makes `server` the server on `basis`, swapping every per-side record
    /// (and telling the sink) when it was the client.
    fn set_roles<S: Sink<T>>(&mut self, server: Endpoint, basis: RoleSource, sink: &mut S) {
        self.info.roles = basis;
        if server == self.info.server {
            return;
        }
        let i = &mut self.info;
        std::mem::swap(&mut i.client, &mut i.server);
        self.client_lo = !self.client_lo;
        i.mss.swap(0, 1);
        i.rtt_to.swap(0, 1);
        self.half.swap(0, 1);
        self.totals.bytes.swap(0, 1);
        sink.swapped(&self.info, &mut self.state);
    }
}

/// Settles the roles on a SYN or a payload segment, before its event is made:
/// the first payload decides; the other direction's first payload confirms,
/// corrects (stronger evidence) or contradicts (content against content);
/// a guess keeps looking for a while.
pub(super) fn settle<T: Default, S: Sink<T>>(c: &mut Conn<T>, seg: &Segment<'_>, sink: &mut S, roles: &mut Book) {
    if seg.flags.syn() {
        // A handshake seen late (a re-sent SYN-ACK) still names the roles.
        let server = if seg.flags.ack() { seg.src } else { seg.dst };
        c.set_roles(server, RoleSource::Handshake, sink);
        c.settle = Settle::Done;
        c.info.roles_open = false;
        return;
    }
    if matches!(c.settle, Settle::Once(e) if e == seg.src) {
        return; // the same direction again
    }
    let (server, basis) = match sender_of(seg.payload) {
        Some(Side::Client) => (seg.dst, RoleSource::Content),
        Some(Side::Server) => (seg.src, RoleSource::Content),
        None => roles.judge(seg.frame, seg.src, seg.dst),
    };
    match c.settle {
        Settle::Open => {
            c.set_roles(server, basis, sink);
            c.settle = Settle::Once(seg.src);
        }
        Settle::Once(_) | Settle::Guess(_) => {
            // Stronger evidence confirms or corrects; weaker is ignored.
            let stronger = (basis as u8) < (c.info.roles as u8);
            if server == c.info.server {
                if stronger {
                    c.info.roles = basis;
                }
            } else if stronger {
                c.set_roles(server, basis, sink);
                c.info.roles_doubt = Some(RolesDoubt::Corrected(seg.frame));
            } else if basis == RoleSource::Content && c.info.roles == RoleSource::Content {
                c.info.roles_doubt = Some(RolesDoubt::Contradicted(seg.frame));
            }
            c.settle = match (c.info.roles, c.settle) {
                (RoleSource::LowerPort, Settle::Guess(n)) if n > 1 => Settle::Guess(n - 1),
                (RoleSource::LowerPort, Settle::Once(_)) => Settle::Guess(GUESS_CHECKS),
                _ => Settle::Done,
            };
        }
        Settle::Done => {}
    }
    // Only a handshake is stronger than content: nothing can swap those.
    c.info.roles_open = c.settle != Settle::Done && (c.info.roles as u8) > (RoleSource::Content as u8);
    if c.info.roles == RoleSource::Content {
        roles.server(seg.frame, c.info.server);
    }
}
