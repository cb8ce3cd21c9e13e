//! Progress display for the long-running examples: an indicatif bar, and lines printed above it
//! (or plainly when the bar is hidden because the output is not a terminal).
//!
//! Included by each example with `#[path = "support/progress.rs"] mod progress;`.

#![allow(dead_code)] // each example uses its own part

use indicatif::{ProgressBar, ProgressStyle};

/// A bar of `len` steps with a message and elapsed / remaining time.
pub fn bar(len: u64) -> ProgressBar {
    let bar = ProgressBar::new(len);
    if let Ok(style) = ProgressStyle::with_template("{bar:30} {pos}/{len} {msg} [{elapsed}<{eta}]")
    {
        bar.set_style(style);
    }
    bar
}

/// Prints `line` above the bar, or plainly when the bar is hidden.
pub fn say(bar: &ProgressBar, line: String) {
    if bar.is_hidden() {
        println!("{line}");
    } else {
        bar.println(line);
    }
}
