//! What the verdict is drawn from: the steps' results, and why fresh
//! connections got no answer when they did not.

use super::fix::Software;
use crate::record::diagnose::{CaptureStep, LoadStep, RttStep, ServerStep};

/// Why requests on fresh connections got no complete response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoAnswer {
    /// The connect was refused (a RST): nothing listens on the port.
    Refused,
    /// The connect failed otherwise: timed out, no route, unreachable.
    Unreachable,
    /// Connected and sent the request; no complete response within the timeout.
    Silent,
    /// Connected, then closed or reset before a complete response.
    Closed,
    /// An answer that is not HTTP/1.x.
    NotHttp,
}

/// Everything the verdict is drawn from.
#[derive(Default)]
pub struct Facts<'a> {
    /// `ip:port` of the server.
    pub server: String,
    /// Step 1.
    pub rtt: Option<&'a RttStep>,
    /// Step 2, fresh connections.
    pub alone: Option<&'a LoadStep>,
    /// Why fresh-connection requests failed, if they did: the kind, and in words.
    pub alone_error: Option<(NoAnswer, &'a str)>,
    /// Step 2, keep-alive load.
    pub load: Option<&'a LoadStep>,
    /// Step 3.
    pub quickack: Option<&'a LoadStep>,
    /// Step 4.
    pub capture: Option<&'a CaptureStep>,
    /// Step 5.
    pub process: Option<&'a ServerStep>,
    /// `Server:` header.
    pub server_header: Option<&'a str>,
    /// The URL is https: responses travel as TLS records.
    pub tls: bool,
}

impl Facts<'_> {
    pub(super) fn software(&self) -> Software {
        if let Some(p) = self.process {
            let s = Software::from_kind(&p.software);
            if s != Software::Other {
                return s;
            }
        }
        self.server_header.map_or(Software::Other, Software::from_header)
    }

    pub(super) fn rtt_ms(&self) -> f64 {
        self.rtt.and_then(|r| r.min_ms).unwrap_or(0.0)
    }
}
