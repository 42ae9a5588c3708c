//! Progress bars on stderr (indicatif) for timed runs: `bench` and the load
//! steps of `diagnose`. indicatif draws them only when stderr is a terminal
//! and `TERM` is not `dumb`; they have no colour, so `NO_COLOR` has nothing to remove.

use indicatif::{ProgressBar, ProgressStyle};
use std::time::Duration;

/// A bar for a run of known length: `{what}{bar} {elapsed}/{total}  N requests  R req/s`.
/// Cleared when dropped.
pub struct RunBar {
    bar: ProgressBar,
    total: Duration,
}

impl RunBar {
    /// A bar for a run of `total`, led by `what` (empty for none).
    pub fn new(what: &str, total: Duration) -> RunBar {
        let bar = ProgressBar::new(total.as_millis() as u64);
        bar.set_style(
            ProgressStyle::with_template("  {prefix}{bar:30} {elapsed:>3}/{msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.set_prefix(what.to_string());
        bar.set_message(format!("{:.0}s", total.as_secs_f64()));
        // Updates come once a second; the tick keeps the elapsed time moving between them.
        if !bar.is_hidden() {
            bar.enable_steady_tick(Duration::from_millis(250));
        }
        RunBar { bar, total }
    }

    /// `t` into the run, `n` responses so far.
    pub fn update(&self, t: Duration, n: u64) {
        self.bar.set_position(t.as_millis() as u64);
        self.bar.set_message(format!(
            "{:.0}s  {n} requests  {:.0} req/s",
            self.total.as_secs_f64(),
            n as f64 / t.as_secs_f64().max(1e-3)
        ));
    }
}

impl Drop for RunBar {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}
