//! Slots: which of a watcher's runs may have a job in the backend's hands now, and on which
//! GPUs.
//!
//! # Theory of operation
//! A run takes a slot before it renders an attempt and gives it back when the attempt's job
//! ends. A slot is one of `--max-parallel` places (any backend) and, on one GPU machine (the
//! local backend with `nvidia-smi`, a cloud machine over SSH), a set of GPU indices no other
//! job of this orch holds: the job sees them through `CUDA_VISIBLE_DEVICES` and its trainer's
//! GPU count is their number. Runs that cannot have one wait in a first-in, first-out queue:
//! only the run at its head is granted, so a big job is never overtaken for ever by small ones.
//!
//! Cards can also be busy for reasons outside this watcher: another program holding most of a
//! card's memory (`nvidia-smi --query-compute-apps`), or a running attempt of a run this orch
//! does not drive (another orch, or one that crashed and was not resumed). The caller supplies
//! them through [`Slots::with_outside`], asked each time the head of the queue is considered.
//! A reattached run whose attempt is live [`Slots::hold`]s the devices its ledger records, so
//! a resumed orch never hands a busy card to a second job.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Mutex;

/// Cards busy for reasons outside this watcher, with a line saying why.
pub type Outside = Box<dyn Fn() -> BTreeMap<u32, String> + Send + Sync>;

/// The slots of one watcher.
pub struct Slots {
    inner: Mutex<Inner>,
    outside: Option<Outside>,
    /// Where the `max_parallel` limit comes from, for the waiting line.
    limit_source: String,
}

struct Inner {
    /// The GPU indices jobs may get; `None` when jobs get no GPU slots (Slurm, no GPUs here).
    devices: Option<Vec<u32>>,
    /// Jobs in the backend's hands at once.
    max_parallel: Option<usize>,
    /// Runs holding a slot, and its devices.
    holders: BTreeMap<String, Vec<u32>>,
    /// Runs waiting, first first.
    queue: VecDeque<String>,
}

/// The answer to [`Slots::take`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Grant {
    /// Go: with these GPU indices (empty without GPU slots).
    Go(Vec<u32>),
    /// Wait in the queue.
    Wait(Waiting),
    /// Never: the job needs more GPUs than orch may use here.
    Never(String),
}

/// Why a run waits, for its progress line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    /// What it waits for: `4 GPUs`, `a free slot (--max-parallel 2)`.
    pub what: String,
    /// Runs ahead of it in the queue.
    pub ahead: usize,
    /// Cards busy outside this watcher, when they are why it waits.
    pub outside: Vec<String>,
}

impl Waiting {
    /// `waiting for 4 GPUs, 2 jobs ahead`.
    pub fn describe(&self) -> String {
        let ahead = match self.ahead {
            0 => String::new(),
            1 => ", 1 job ahead".into(),
            n => format!(", {n} jobs ahead"),
        };
        format!("waiting for {}{ahead}", self.what)
    }
}

impl Slots {
    /// Slots for `devices` (the GPU indices jobs may get, `None` for no GPU slots) and at most
    /// `max_parallel` jobs at once.
    pub fn new(devices: Option<Vec<u32>>, max_parallel: Option<usize>) -> Self {
        Slots {
            inner: Mutex::new(Inner {
                devices,
                max_parallel: max_parallel.map(|n| n.max(1)),
                holders: BTreeMap::new(),
                queue: VecDeque::new(),
            }),
            outside: None,
            limit_source: max_parallel.map_or(String::new(), |n| format!("--max-parallel {n}")),
        }
    }

    /// Say where the job limit comes from when it is not `--max-parallel` (a default).
    pub fn limited_by(mut self, source: impl Into<String>) -> Self {
        self.limit_source = source.into();
        self
    }

    /// Ask `outside` which cards are busy for reasons outside this watcher before granting any.
    pub fn with_outside(mut self, outside: Outside) -> Self {
        self.outside = Some(outside);
        self
    }

    /// Whether jobs get GPU indices.
    pub fn has_devices(&self) -> bool {
        self.lock().devices.is_some()
    }

    /// A reattached run's live attempt keeps the devices its ledger records.
    pub fn hold(&self, run: &str, devices: Vec<u32>) {
        let mut inner = self.lock();
        inner.queue.retain(|r| r != run);
        inner.holders.insert(run.to_string(), devices);
    }

    /// A slot with `gpus` GPUs for `run`'s next job: at once if it is first in the queue and
    /// one is free, else its place in the queue. A run that already holds one keeps it.
    pub fn take(&self, run: &str, gpus: u32) -> Grant {
        let mut inner = self.lock();
        if let Some(devices) = &inner.devices
            && gpus as usize > devices.len()
        {
            let never = Grant::Never(format!(
                "the job needs {gpus} GPUs and orch may use {} here (GPUs {})",
                devices.len(),
                list(devices)
            ));
            inner.holders.remove(run);
            inner.queue.retain(|r| r != run);
            return never;
        }
        if let Some(held) = inner.holders.get(run) {
            // The run's next attempt keeps its cards, unless it needs another number of them:
            // then it gives them back and is first in line.
            if inner.devices.is_none() || held.len() == gpus as usize {
                return Grant::Go(held.clone());
            }
            inner.holders.remove(run);
            inner.queue.push_front(run.to_string());
        }
        if !inner.queue.iter().any(|r| r == run) {
            inner.queue.push_back(run.to_string());
        }
        let ahead = inner.queue.iter().position(|r| r == run).unwrap_or(0);
        let wait = |what: String, outside: Vec<String>| {
            Grant::Wait(Waiting {
                what,
                ahead,
                outside,
            })
        };
        let gpu_word = |n: u32| format!("{n} GPU{}", if n == 1 { "" } else { "s" });
        if ahead > 0 {
            return wait(
                match inner.devices {
                    Some(_) => gpu_word(gpus),
                    None => "a free slot".into(),
                },
                Vec::new(),
            );
        }
        if inner
            .max_parallel
            .is_some_and(|max| inner.holders.len() >= max)
        {
            return wait(format!("a free slot ({})", self.limit_source), Vec::new());
        }
        let Some(devices) = inner.devices.clone() else {
            inner.queue.pop_front();
            inner.holders.insert(run.to_string(), Vec::new());
            return Grant::Go(Vec::new());
        };
        let outside = self.outside.as_ref().map(|f| f()).unwrap_or_default();
        let taken: BTreeSet<u32> = inner.holders.values().flatten().copied().collect();
        let free: Vec<u32> = devices
            .iter()
            .copied()
            .filter(|d| !taken.contains(d) && !outside.contains_key(d))
            .collect();
        if free.len() < gpus as usize {
            let blocking = outside
                .into_iter()
                .filter(|(d, _)| !taken.contains(d))
                .map(|(_, why)| why)
                .collect();
            return wait(gpu_word(gpus), blocking);
        }
        let chosen: Vec<u32> = free[..gpus as usize].to_vec();
        inner.queue.pop_front();
        inner.holders.insert(run.to_string(), chosen.clone());
        Grant::Go(chosen)
    }

    /// `run`'s job ended (or it left the queue): its slot is free for the next in line.
    pub fn release(&self, run: &str) {
        let mut inner = self.lock();
        inner.holders.remove(run);
        inner.queue.retain(|r| r != run);
    }

    /// The devices `run` holds, if it holds a slot.
    pub fn held_by(&self, run: &str) -> Option<Vec<u32>> {
        self.lock().holders.get(run).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// `0,1,2,3`: how `CUDA_VISIBLE_DEVICES` lists devices.
pub fn list(devices: &[u32]) -> String {
    devices
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn go(g: Grant) -> Vec<u32> {
        match g {
            Grant::Go(d) => d,
            other => panic!("expected a grant, got {other:?}"),
        }
    }

    fn waits(g: Grant) -> Waiting {
        match g {
            Grant::Wait(w) => w,
            other => panic!("expected to wait, got {other:?}"),
        }
    }

    #[test]
    fn jobs_get_disjoint_devices_and_the_rest_wait_in_order() {
        let slots = Slots::new(Some((0..8).collect()), None);
        assert_eq!(go(slots.take("a", 4)), [0, 1, 2, 3]);
        assert_eq!(go(slots.take("b", 4)), [4, 5, 6, 7]);
        let c = waits(slots.take("c", 4));
        assert_eq!((c.ahead, c.describe().as_str()), (0, "waiting for 4 GPUs"));
        let d = waits(slots.take("d", 4));
        assert_eq!(d.describe(), "waiting for 4 GPUs, 1 job ahead");
        // Asking again keeps the place.
        assert_eq!(waits(slots.take("d", 4)).ahead, 1);
        slots.release("b");
        // d is behind c: it may not overtake it even though 4 GPUs are free.
        assert_eq!(waits(slots.take("d", 4)).ahead, 1);
        assert_eq!(go(slots.take("c", 4)), [4, 5, 6, 7]);
        assert_eq!(waits(slots.take("d", 4)).ahead, 0);
        slots.release("a");
        assert_eq!(go(slots.take("d", 4)), [0, 1, 2, 3]);
        // A holder asking again keeps its devices (a retry on the same cards)...
        assert_eq!(go(slots.take("d", 4)), [0, 1, 2, 3]);
        // ... unless it needs more: then it gives them back and is first in line.
        slots.release("c");
        assert_eq!(go(slots.take("e", 2)), [4, 5]);
        assert_eq!(waits(slots.take("d", 8)).ahead, 0);
        assert_eq!(slots.held_by("d"), None);
        assert_eq!(waits(slots.take("f", 2)).ahead, 1);
    }

    #[test]
    fn a_job_bigger_than_the_machine_never_starts() {
        let slots = Slots::new(Some(vec![0, 1]), None);
        assert!(matches!(slots.take("a", 4), Grant::Never(m) if m.contains("needs 4 GPUs")));
    }

    #[test]
    fn max_parallel_limits_jobs_without_devices() {
        let slots = Slots::new(None, Some(2));
        assert_eq!(go(slots.take("a", 8)), Vec::<u32>::new());
        go(slots.take("b", 8));
        let c = waits(slots.take("c", 8));
        assert_eq!(c.describe(), "waiting for a free slot (--max-parallel 2)");
        slots.release("a");
        go(slots.take("c", 8));
    }

    #[test]
    fn busy_cards_and_held_devices_are_never_handed_out() {
        let slots = Slots::new(Some((0..4).collect()), None).with_outside(Box::new(|| {
            BTreeMap::from([(
                1,
                "GPU 1: 40.0 of 45.0 GiB held by pid 7 (python)".to_string(),
            )])
        }));
        // A reattached live attempt keeps GPU 2.
        slots.hold("resumed", vec![2]);
        assert_eq!(go(slots.take("a", 1)), [0]);
        assert_eq!(go(slots.take("b", 1)), [3]);
        let w = waits(slots.take("c", 1));
        assert!(w.outside[0].contains("pid 7"), "{w:?}");
        slots.release("resumed");
        assert_eq!(go(slots.take("c", 1)), [2]);
    }
}
