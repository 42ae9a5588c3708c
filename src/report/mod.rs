//! The renderers: each verb's record (`crate::record`) as text for a
//! terminal, the packet ladder, the `--html` page, and what text output needs
//! (colour, the terminal's width, progress bars). They only read records.

pub mod bench;
pub mod diagnose;
pub mod html;
pub mod inspect;
pub mod ladder;
pub mod nodelay;
pub mod probe;
pub mod progress;
pub mod style;
pub(crate) mod text;
pub mod trace;
pub mod width;

pub use text::render;
