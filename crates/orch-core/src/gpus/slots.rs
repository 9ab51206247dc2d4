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
//!
//! A sweep may queue thousands of runs, each asking again every time the watcher looks, so
//! the queue costs O(log n) per question whatever its length ([`Queue`]): joining, leaving,
//! the run first in line ([`Slots::next_in_line`], all a watcher needs to ask each tick) and
//! how many runs are ahead of one.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
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
    queue: Queue,
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
                queue: Queue::default(),
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
        inner.queue.remove(run);
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
            inner.queue.remove(run);
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
        let ahead = match inner.queue.ahead_of(run) {
            Some(ahead) => ahead,
            None => inner.queue.push_back(run.to_string()),
        };
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
            inner.queue.remove(run);
            inner.holders.insert(run.to_string(), Vec::new());
            return Grant::Go(Vec::new());
        };
        let taken: BTreeSet<u32> = inner.holders.values().flatten().copied().collect();
        // While this watcher's own jobs leave too few cards, what is busy outside cannot change
        // the answer: it is not asked (an `nvidia-smi` each tick of a sweep that fills the
        // machine cost a watcher of 10,000 runs 16 % of a core while it waited).
        if devices.iter().filter(|d| !taken.contains(d)).count() < gpus as usize {
            return wait(gpu_word(gpus), Vec::new());
        }
        let outside = self.outside.as_ref().map(|f| f()).unwrap_or_default();
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
        inner.queue.remove(run);
        inner.holders.insert(run.to_string(), chosen.clone());
        Grant::Go(chosen)
    }

    /// `run`'s job ended (or it left the queue): its slot is free for the next in line.
    pub fn release(&self, run: &str) {
        let mut inner = self.lock();
        inner.holders.remove(run);
        inner.queue.remove(run);
    }

    /// The run first in line, if any waits: the only one a free slot may go to, so a watcher
    /// asks it alone while the others wait.
    pub fn next_in_line(&self) -> Option<String> {
        self.lock().queue.first().map(str::to_string)
    }

    /// A count that changes whenever a waiting run's place in line may have (a run left the
    /// queue or went first): while it stays, no run behind the first in line has moved, and a
    /// watcher need not ask for them again to keep their lines current.
    pub fn moves(&self) -> u64 {
        self.lock().queue.moves
    }

    /// The devices `run` holds, if it holds a slot.
    pub fn held_by(&self, run: &str) -> Option<Vec<u32>> {
        self.lock().holders.get(run).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The runs waiting for a slot, first first, with every question O(log n).
///
/// Runs join at the back in arrival order and are numbered as they arrive: `back` orders
/// them by that number, `index` finds a run's number, and `counts` (a Fenwick tree over the
/// numbers) says how many of them arrived before it. A holder that gives its cards back to
/// ask for another number of them goes to the very front (`front`): few runs are there at
/// once, no more than held slots, so that part is a plain list.
#[derive(Default)]
struct Queue {
    /// Runs put back at the front, first first.
    front: VecDeque<String>,
    /// The others, by arrival number.
    back: BTreeMap<u64, String>,
    /// Every waiting run and where it is.
    index: HashMap<String, Place>,
    /// How many runs of `back` hold each arrival number (0 or 1), summed by prefix.
    counts: Fenwick,
    /// The next arrival number.
    next: u64,
    /// How many times a run left the queue or was put first: the only moves that change how
    /// many runs are ahead of another.
    moves: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Front,
    Back(u64),
}

impl Queue {
    /// How many runs are ahead of `run`; None when it does not wait.
    fn ahead_of(&self, run: &str) -> Option<usize> {
        Some(match *self.index.get(run)? {
            Place::Front => self.front.iter().position(|r| r == run).unwrap_or(0),
            Place::Back(n) => self.front.len() + self.counts.before(n as usize),
        })
    }

    /// `run` joins at the back; returns how many runs are ahead of it.
    fn push_back(&mut self, run: String) -> usize {
        if self.next as usize >= self.counts.len() {
            self.renumber();
        }
        let n = self.next;
        self.next += 1;
        self.counts.add(n as usize, 1);
        self.back.insert(n, run.clone());
        self.index.insert(run, Place::Back(n));
        self.front.len() + self.back.len() - 1
    }

    /// `run` goes first in line.
    fn push_front(&mut self, run: String) {
        self.remove(&run);
        self.moves += 1;
        self.front.push_front(run.clone());
        self.index.insert(run, Place::Front);
    }

    /// `run` leaves the queue, wherever it is.
    fn remove(&mut self, run: &str) {
        let Some(place) = self.index.remove(run) else {
            return;
        };
        self.moves += 1;
        match place {
            Place::Front => self.front.retain(|r| r != run),
            Place::Back(n) => {
                self.back.remove(&n);
                self.counts.add(n as usize, -1);
            }
        }
    }

    /// The run first in line.
    fn first(&self) -> Option<&str> {
        self.front
            .front()
            .or_else(|| self.back.first_key_value().map(|(_, r)| r))
            .map(String::as_str)
    }

    /// Out of arrival numbers: number the waiting runs again from 0, in order, with room for
    /// as many again (amortised O(1) per arrival).
    fn renumber(&mut self) {
        let waiting = std::mem::take(&mut self.back);
        self.counts = Fenwick::new((2 * waiting.len()).max(64));
        for (n, run) in waiting.into_values().enumerate() {
            self.counts.add(n, 1);
            self.index.insert(run.clone(), Place::Back(n as u64));
            self.back.insert(n as u64, run);
        }
        self.next = self.back.len() as u64;
    }
}

/// Counts by position, with the sum of those before any position in O(log n).
#[derive(Default)]
struct Fenwick(Vec<i64>);

impl Fenwick {
    fn new(len: usize) -> Self {
        Fenwick(vec![0; len + 1])
    }

    fn len(&self) -> usize {
        self.0.len().saturating_sub(1)
    }

    fn add(&mut self, at: usize, delta: i64) {
        let mut i = at + 1;
        while i < self.0.len() {
            self.0[i] += delta;
            i += i & i.wrapping_neg();
        }
    }

    /// The sum of the counts at positions below `at`.
    fn before(&self, at: usize) -> usize {
        let mut i = at.min(self.len());
        let mut sum = 0;
        while i > 0 {
            sum += self.0[i];
            i -= i & i.wrapping_neg();
        }
        sum as usize
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

    #[test]
    fn busy_outside_is_not_asked_while_own_jobs_hold_the_cards() {
        let asked = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = asked.clone();
        let slots = Slots::new(Some(vec![0, 1]), None).with_outside(Box::new(move || {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            BTreeMap::new()
        }));
        assert_eq!(go(slots.take("a", 2)), vec![0, 1]);
        assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 1);
        for _ in 0..5 {
            let w = waits(slots.take("b", 1));
            assert!(w.outside.is_empty(), "{w:?}");
        }
        assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 1);
        slots.release("a");
        assert_eq!(go(slots.take("b", 1)), vec![0]);
        assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    #[test]
    fn a_long_queue_grants_in_arrival_order_and_counts_those_ahead() {
        let slots = Slots::new(None, Some(1));
        go(slots.take("holder", 1));
        // Past the first numbering (64 arrivals), so the queue renumbers while runs wait.
        let runs: Vec<String> = (0..300).map(|i| format!("r{i}")).collect();
        for (i, r) in runs.iter().enumerate() {
            assert_eq!(waits(slots.take(r, 1)).ahead, i);
        }
        // Runs leaving from the middle move those behind them up.
        slots.release("r10");
        slots.release("r11");
        assert_eq!(waits(slots.take("r12", 1)).ahead, 10);
        assert_eq!(waits(slots.take("r299", 1)).ahead, 297);
        assert_eq!(slots.next_in_line().as_deref(), Some("r0"));
        // Asking again, in any order, keeps each run's place.
        assert_eq!(waits(slots.take("r5", 1)).ahead, 5);
        let mut granted = Vec::new();
        let mut last = "holder".to_string();
        while let Some(first) = slots.next_in_line() {
            slots.release(&last);
            // Only the first in line is given the free slot.
            if first != "r299" {
                assert!(matches!(slots.take("r299", 1), Grant::Wait(_)));
            }
            go(slots.take(&first, 1));
            granted.push(first.clone());
            last = first;
        }
        let expected: Vec<&String> = runs.iter().filter(|r| *r != "r10" && *r != "r11").collect();
        assert_eq!(granted.iter().collect::<Vec<_>>(), expected);
        assert_eq!(slots.next_in_line(), None);
    }

    #[test]
    fn resumed_live_attempts_hold_their_cards_before_the_queue_moves() {
        let slots = Slots::new(Some((0..4).collect()), None);
        // Queued first, then found live when the watcher starts: it leaves the queue and keeps
        // its recorded cards; the run behind it is first in line.
        assert_eq!(go(slots.take("a", 4)), [0, 1, 2, 3]);
        assert_eq!(waits(slots.take("resumed", 2)).ahead, 0);
        assert_eq!(waits(slots.take("b", 2)).ahead, 1);
        slots.hold("resumed", vec![1, 3]);
        assert_eq!(slots.next_in_line().as_deref(), Some("b"));
        assert_eq!(waits(slots.take("b", 2)).ahead, 0);
        slots.release("a");
        // The held cards are never handed out; its retry on the same number keeps them.
        assert_eq!(go(slots.take("b", 2)), [0, 2]);
        assert_eq!(go(slots.take("resumed", 2)), [1, 3]);
        // A holder that needs more gives its cards back and goes before everyone waiting.
        assert_eq!(waits(slots.take("c", 1)).ahead, 0);
        assert_eq!(waits(slots.take("resumed", 4)).ahead, 0);
        assert_eq!(waits(slots.take("c", 1)).ahead, 1);
        assert_eq!(slots.next_in_line().as_deref(), Some("resumed"));
        slots.release("b");
        assert_eq!(waits(slots.take("c", 1)).ahead, 1);
        assert_eq!(go(slots.take("resumed", 4)), [0, 1, 2, 3]);
        assert_eq!(waits(slots.take("c", 1)).ahead, 0);
    }

    /// The queue answers as the plain list it replaced, whatever the order of questions.
    #[test]
    fn the_queue_agrees_with_a_plain_list() {
        let mut queue = Queue::default();
        let mut model: VecDeque<String> = VecDeque::new();
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..20_000 {
            let run = format!("r{}", next() % 150);
            match next() % 5 {
                0 | 1 => {
                    let ahead = queue
                        .ahead_of(&run)
                        .unwrap_or_else(|| queue.push_back(run.clone()));
                    if !model.contains(&run) {
                        model.push_back(run.clone());
                    }
                    assert_eq!(Some(ahead), model.iter().position(|r| *r == run));
                }
                2 => {
                    queue.push_front(run.clone());
                    model.retain(|r| *r != run);
                    model.push_front(run);
                }
                _ => {
                    queue.remove(&run);
                    model.retain(|r| *r != run);
                }
            }
            assert_eq!(queue.first(), model.front().map(String::as_str));
            assert_eq!(queue.index.len(), model.len());
        }
    }
}
