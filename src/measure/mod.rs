//! The measuring instruments of the method: `bench` (HTTP load under
//! concurrency, with the client-side signature of a Nagle stall).

pub mod bench;
