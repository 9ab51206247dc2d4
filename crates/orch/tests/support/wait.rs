//! Waiting for something another process does. Shared by orch's tests and orch-ssh's (which
//! includes this file by path), so it uses nothing but std.

use std::time::{Duration, Instant};

/// Ask `ready` every `every` until it gives a value; fail the test, naming `what`, if none
/// came `within`. `ready` is asked once more at the deadline.
pub fn wait_for<T>(
    what: &str,
    within: Duration,
    every: Duration,
    mut ready: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        let last_chance = Instant::now() >= deadline;
        if let Some(value) = ready() {
            return value;
        }
        assert!(!last_chance, "{what}: not within {within:?}");
        std::thread::sleep(every);
    }
}
