//! tcpdoctor finds where a TCP request's milliseconds go and names the cause
//! with evidence: Nagle + delayed ACK, retransmission timeouts, SYN retries,
//! zero windows, or a slow application.
//!
//! Data flows one way: [`capture`] (pcap/pcapng) → [`wire`] (header views) →
//! [`tcp`] (connection events) → [`detect`] (one module per cause) →
//! [`analyze`] (runs the pipeline and draws the verdict from its aggregates)
//! → a [`record`] → a renderer in [`report`] (text, ladders, HTML), which the
//! binary calls. [`measure`] holds the active instruments (`bench`, `probe`,
//! `trace`); [`inspect`] looks at a live process's sockets and [`nodelay`]
//! switches their TCP_NODELAY live (and back); [`diagnose`] runs the method
//! against a URL; [`watch`] runs the analysis on a live capture and exports
//! Prometheus metrics; [`lab`] and [`demo`] reproduce the causes.
//!
//! Each verb fills the types of [`record`] (the JSON contract: the types,
//! their schemas, the schema version); the renderers only read them. The
//! record model imports no verb and no renderer, no library module imports
//! the renderers, and no two modules import each other (`tests/layers.rs`):
//! what two share has its own file ([`words`], [`escape`]).

pub mod analyze;
pub mod capture;
pub mod demo;
pub mod detect;
pub mod diagnose;
pub mod dist;
mod ebpf;
pub mod escape;
pub mod filter;
pub mod input;
pub mod inspect;
pub mod interrupt;
pub mod lab;
pub mod measure;
pub mod nodelay;
pub mod output;
mod prefetch;
pub mod record;
pub mod report;
pub mod tcp;
pub mod watch;
pub mod wire;
pub mod words;
