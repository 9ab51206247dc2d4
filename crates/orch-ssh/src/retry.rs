//! Retrying with jittered exponential backoff: the one loop behind every orch call that tries
//! again (Slurm commands while the controller is down, SSH operations while the connection is
//! being re-established).
//!
//! # Theory of operation
//! A [`Backoff`] is a policy: the first wait, the longest wait, how much jitter, and when to
//! give up (after a number of attempts, or once a time budget is spent, or both). The wait after
//! the `n`th failed attempt is `first · 2^(n-1)`, capped at `max`, then scaled by a random
//! factor in `[1 - jitter, 1 + jitter)` so that many clients that failed together (every orch
//! watching one cluster when its controller restarts) do not come back in lockstep.
//! [`Backoff::wait`] computes that as a pure function of the failure count, the time spent and
//! the random draw, which is what the tests check.
//!
//! [`retry`] runs an operation under a policy: each attempt says whether it is done (success,
//! or a failure that another try would only repeat) or may pass if tried again ([`Attempt`]);
//! before each wait a callback hears why and for how long, for the user or the log. When the
//! policy gives up, the last failure is returned.

use std::future::Future;
use std::time::{Duration, Instant};

/// A retry policy: exponential backoff with jitter and a limit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// The wait after the first failed attempt.
    pub first: Duration,
    /// The longest wait (before jitter).
    pub max: Duration,
    /// Each wait is scaled by a random factor in `[1 - jitter, 1 + jitter)`; 0 turns it off.
    /// Clamped to `0..=1`.
    pub jitter: f64,
    /// Give up after this many attempts (the first included); `None`: no such limit.
    pub attempts: Option<u32>,
    /// Give up when a failure comes this long after the first attempt began; `None`: no such
    /// limit.
    pub within: Option<Duration>,
}

impl Backoff {
    /// Waits from `first` doubling up to `max`, ±25 % jitter, no limit yet.
    pub const fn new(first: Duration, max: Duration) -> Backoff {
        Backoff {
            first,
            max,
            jitter: 0.25,
            attempts: None,
            within: None,
        }
    }

    /// Give up after `n` attempts in all.
    pub const fn attempts(self, n: u32) -> Backoff {
        Backoff {
            attempts: Some(n),
            ..self
        }
    }

    /// Give up once `budget` has passed since the first attempt began.
    pub const fn within(self, budget: Duration) -> Backoff {
        Backoff {
            within: Some(budget),
            ..self
        }
    }

    /// Scale waits by a random factor in `[1 - jitter, 1 + jitter)`.
    pub const fn jitter(self, jitter: f64) -> Backoff {
        Backoff { jitter, ..self }
    }

    /// The wait after `failures` failed attempts (1 for the first), before jitter:
    /// `first · 2^(failures-1)`, at most `max`.
    pub fn nominal(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(1000) as i32;
        let secs = self.first.as_secs_f64() * 2f64.powi(doublings);
        Duration::try_from_secs_f64(secs).map_or(self.max, |d| d.min(self.max))
    }

    /// `nominal` scaled by the jitter factor that `unit` (a draw from `[0, 1)`) picks.
    pub fn jittered(&self, nominal: Duration, unit: f64) -> Duration {
        let jitter = self.jitter.clamp(0.0, 1.0);
        let factor = 1.0 - jitter + 2.0 * jitter * unit.clamp(0.0, 1.0);
        nominal.mul_f64(factor)
    }

    /// The wait before the next attempt after `failures` failed ones, the first of which began
    /// `elapsed` ago, with `unit` the random draw for the jitter; `None` when the policy gives
    /// up instead.
    pub fn wait(&self, failures: u32, elapsed: Duration, unit: f64) -> Option<Duration> {
        if self.attempts.is_some_and(|n| failures >= n) {
            return None;
        }
        if self.within.is_some_and(|budget| elapsed >= budget) {
            return None;
        }
        Some(self.jittered(self.nominal(failures), unit))
    }
}

/// What one attempt came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt<T, E> {
    /// Finished: a success, or a failure that trying again would only repeat. Returned as is.
    Done(T),
    /// Failed in a way that may pass (a controller that is down, a dropped connection): wait
    /// and try again, unless the policy gives up; then this is what [`retry`] returns.
    Again(E),
}

/// Run `op` until it is [`Attempt::Done`] or `backoff` gives up, sleeping with tokio between
/// attempts. `op` gets the attempt number (1 for the first). `before_wait` hears each failure
/// that will be retried and how long the wait before the next attempt is. Returns `Ok` with
/// what the last attempt finished with, or `Err` with the last failure when the policy gave up.
pub async fn retry<T, E, Op, Fut>(
    backoff: &Backoff,
    op: Op,
    before_wait: impl FnMut(&E, Duration),
) -> Result<T, E>
where
    Op: FnMut(u32) -> Fut,
    Fut: Future<Output = Attempt<T, E>>,
{
    let started = Instant::now();
    let clock = Clock {
        elapsed: move || started.elapsed(),
        sleep: tokio::time::sleep,
        unit: fastrand::f64,
    };
    retry_with(backoff, clock, op, before_wait).await
}

/// Where [`retry_with`] gets the time, its sleep and its random draws: tokio and the real
/// clock in [`retry`], fakes in the tests (so that no test waits or depends on timing).
struct Clock<El, Sl, Un> {
    elapsed: El,
    sleep: Sl,
    unit: Un,
}

async fn retry_with<T, E, Op, Fut, El, Sl, SlFut, Un>(
    backoff: &Backoff,
    mut clock: Clock<El, Sl, Un>,
    mut op: Op,
    mut before_wait: impl FnMut(&E, Duration),
) -> Result<T, E>
where
    Op: FnMut(u32) -> Fut,
    Fut: Future<Output = Attempt<T, E>>,
    El: FnMut() -> Duration,
    Sl: FnMut(Duration) -> SlFut,
    SlFut: Future<Output = ()>,
    Un: FnMut() -> f64,
{
    let mut failures = 0;
    loop {
        let why = match op(failures + 1).await {
            Attempt::Done(done) => return Ok(done),
            Attempt::Again(why) => why,
        };
        failures += 1;
        let Some(wait) = backoff.wait(failures, (clock.elapsed)(), (clock.unit)()) else {
            return Err(why);
        };
        before_wait(&why, wait);
        (clock.sleep)(wait).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::{Cell, RefCell};

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn waits_double_up_to_the_cap() {
        let b = Backoff::new(S(1), S(30)).jitter(0.0);
        let waits: Vec<_> = (1..=8).map(|n| b.nominal(n)).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30, 30].map(S));
        assert_eq!(b.nominal(1000), S(30), "no overflow however many failures");
        let half = Backoff::new(Duration::from_millis(500), S(15));
        assert_eq!(half.nominal(1), Duration::from_millis(500));
        assert_eq!(half.nominal(6), S(15));
    }

    #[test]
    fn jitter_stays_within_its_bounds() {
        let b = Backoff::new(S(1), S(30));
        assert_eq!(b.jittered(S(8), 0.0), S(6));
        assert_eq!(b.jittered(S(8), 0.5), S(8));
        assert!(b.jittered(S(8), 0.999_999) < S(10));
        for _ in 0..1000 {
            // The fourth wait: 8 s ± 25 %.
            let w = b.wait(4, S(0), fastrand::f64()).unwrap();
            assert!(w >= S(6) && w < S(10), "{w:?}");
        }
        assert_eq!(b.jitter(0.0).jittered(S(8), 0.9), S(8));
        assert_eq!(b.jitter(7.0).jittered(S(8), 0.0), S(0), "clamped to 100 %");
    }

    #[test]
    fn gives_up_after_the_attempts_or_the_time_budget() {
        let by_count = Backoff::new(S(1), S(30)).attempts(3);
        assert!(by_count.wait(1, S(0), 0.5).is_some());
        assert!(by_count.wait(2, S(0), 0.5).is_some());
        assert_eq!(by_count.wait(3, S(0), 0.5), None);
        let by_time = Backoff::new(S(1), S(30)).within(S(120));
        assert!(by_time.wait(50, S(119), 0.5).is_some());
        assert_eq!(by_time.wait(2, S(120), 0.5), None);
    }

    /// Run `retry_with` on a fake clock: sleeping advances it, nothing really waits.
    fn run<T, E>(
        backoff: &Backoff,
        mut outcomes: Vec<Attempt<T, E>>,
    ) -> (Result<T, E>, Vec<u32>, Vec<Duration>) {
        let now = Cell::new(Duration::ZERO);
        let slept = RefCell::new(Vec::new());
        let mut tries = Vec::new();
        let clock = Clock {
            elapsed: || now.get(),
            sleep: |d| {
                now.set(now.get() + d);
                slept.borrow_mut().push(d);
                std::future::ready(())
            },
            unit: || 0.5,
        };
        outcomes.reverse();
        let op = |n| {
            tries.push(n);
            std::future::ready(outcomes.pop().expect("no more attempts planned"))
        };
        let mut heard = 0;
        let result = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(retry_with(backoff, clock, op, |_, _| heard += 1));
        let slept = slept.into_inner();
        assert_eq!(heard, slept.len(), "one notice per wait");
        (result, tries, slept)
    }

    #[test]
    fn retries_until_done() {
        let b = Backoff::new(S(1), S(30)).attempts(8);
        let (result, tries, slept) = run(
            &b,
            vec![
                Attempt::Again("busy"),
                Attempt::Again("busy"),
                Attempt::Done(7),
            ],
        );
        assert_eq!(result, Ok(7));
        assert_eq!(tries, [1, 2, 3]);
        assert_eq!(slept, [S(1), S(2)]);
    }

    #[test]
    fn stops_at_once_on_a_failure_that_retrying_would_repeat() {
        let b = Backoff::new(S(1), S(30)).attempts(8);
        let (result, tries, slept) =
            run::<Result<(), &str>, &str>(&b, vec![Attempt::Done(Err("refused"))]);
        assert_eq!(result, Ok(Err("refused")));
        assert_eq!(tries, [1]);
        assert!(slept.is_empty());
    }

    #[test]
    fn gives_up_with_the_last_failure() {
        let b = Backoff::new(S(1), S(30)).attempts(3);
        let (result, tries, slept) = run::<(), _>(
            &b,
            vec![Attempt::Again(1), Attempt::Again(2), Attempt::Again(3)],
        );
        assert_eq!(result, Err(3));
        assert_eq!(tries, [1, 2, 3]);
        assert_eq!(slept, [S(1), S(2)]);

        // A time budget counts the waits (here, all the time there is): 0.5+1+2+4 = 7.5 s.
        let b = Backoff::new(Duration::from_millis(500), S(15)).within(S(7));
        let (result, _, slept) = run::<(), _>(&b, (1..=10).map(Attempt::Again).collect());
        assert_eq!(result, Err(5));
        assert_eq!(slept.iter().sum::<Duration>(), Duration::from_millis(7500));
    }
}
