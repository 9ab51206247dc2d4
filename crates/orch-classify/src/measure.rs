//! What a running job measured of itself: its peak GPU memory, its throughput and its step
//! time, read from the lines the trainer prints as it trains.
//!
//! The estimator predicts; these lines are what happened. Each trainer prints them in its own
//! shape, and every shape read here is the real trainer's (file and version named):
//!
//! - **verl** (`verl/utils/logger/aggregate_logger.py`, `concat_dict_to_str`, volcengine/verl
//!   main at b178a3cd5): one line per step, `step:12 - key:value - key:value …`, behind Ray's
//!   `(TaskRunner pid=N) ` prefix. The keys read: `perf/max_memory_allocated_gb` and
//!   `perf/max_memory_reserved_gb` (`verl/workers/fsdp_workers.py:915-916`,
//!   `megatron_workers.py:763-764`: `torch.cuda.max_memory_*() / 1024**3`, so GiB),
//!   `perf/throughput` (`verl/trainer/ppo/metric_utils.py:302`: tokens per second *per GPU*)
//!   and `timing_s/step` (`compute_timing_metrics`, the whole step in seconds).
//! - **examples/torchrun/train.py** (this repository): per step
//!   `step 12 loss 10.3712 tokens/s 48213 peak_allocated_gib 31.42 peak_reserved_gib 33.10`
//!   (tokens/s of all GPUs together; lines 256-260), and last
//!   `train-summary {"peak_allocated_gib": …, "peak_reserved_gib": …, "tokens_per_s": …}`
//!   (lines 264-278), whose `tokens_per_s` is the script's own median over the steps after the
//!   first and replaces the one computed here.
//! - **AReaL** (inclusionAI/AReaL v1.0.4): `DeviceRuntimeInfo.log`
//!   (`areal/api/io_struct.py:406-417`) prints `Memory-Usage <head>: memory allocated (GB): X,
//!   memory reserved (GB): Y, device memory used/total (GB): U/T` around model load and each
//!   offload/onload (`areal/engine/fsdp_engine.py:910-932, 1026, 1062`). These are the memory in
//!   use *then*, not torch's peak, so for AReaL the figure is the largest seen: a lower bound of
//!   the peak (the caching allocator keeps what the update reserved, so `before offload model`
//!   after a train step shows nearly all of it). Steps from `StatsLogger.commit`'s
//!   `Train step N/T done.` (`areal/utils/stats_logger.py:136-141`), the step time from the
//!   `timeperf/train_step` statistic it prints (`stats_tracker.record_timing("train_step")`,
//!   `areal/trainer/rl_trainer.py:667`), in its table (`│ key │ value │`) or as `key=value`.
//!
//! One generic reading serves every shape: a key is found, then the separators that follow it
//! (`:`, `=`, spaces, quotes, table bars) are skipped and the number after them is read. Lines
//! are found as the classifier finds its own: one multi-literal search over the complete lines
//! of each chunk, so a log of progress bars costs one pass.

use aho_corasick::AhoCorasick;
use memchr::{memchr, memchr_iter, memrchr};
use serde::{Deserialize, Serialize};
use std::sync::OnceLock;

/// What an attempt's own log measured. Every figure is optional: each trainer prints some.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    /// torch's peak allocated memory on the busiest reported GPU, GiB (AReaL: the largest
    /// allocated figure it logged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_allocated_gib: Option<f64>,
    /// torch's peak reserved memory (what the card had to hold), GiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_reserved_gib: Option<f64>,
    /// Tokens per second as the trainer reports it (verl: per GPU; train.py: all GPUs): the
    /// median of the steps after the first, or the trainer's own summary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_s: Option<f64>,
    /// Seconds per step: the median of the steps after the first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_time_s: Option<f64>,
    /// The last step the log reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<u64>,
    /// `file:line` of the line the peak was read from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Real tokens per sequence the rollouts produced: verl's `prompt_length/mean` +
    /// `response_length/mean` (`compute_data_metrics`, `verl/trainer/ppo/metric_utils.py` at
    /// 07c9cf137), the median over the steps read. What a micro-batch holds once padding is
    /// removed, where the estimate otherwise assumes a default share of the padded length.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequence_tokens: Option<f64>,
}

impl Measured {
    /// Whether it holds any figure.
    pub fn is_empty(&self) -> bool {
        self.peak_allocated_gib.is_none()
            && self.peak_reserved_gib.is_none()
            && self.tokens_per_s.is_none()
            && self.step_time_s.is_none()
            && self.steps.is_none()
    }

    /// The memory the card had to hold: reserved where reported, else allocated.
    pub fn peak_gib(&self) -> Option<f64> {
        self.peak_reserved_gib.or(self.peak_allocated_gib)
    }

    /// `peak 31.4 GiB allocated / 33.1 reserved, 48213 tokens/s, 1.20 s/step, 40 steps`.
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        match (self.peak_allocated_gib, self.peak_reserved_gib) {
            (Some(a), Some(r)) => {
                parts.push(format!("peak {a:.1} GiB allocated / {r:.1} reserved"))
            }
            (Some(a), None) => parts.push(format!("peak {a:.1} GiB allocated")),
            (None, Some(r)) => parts.push(format!("peak {r:.1} GiB reserved")),
            (None, None) => {}
        }
        if let Some(t) = self.tokens_per_s {
            parts.push(format!("{t:.0} tokens/s"));
        }
        if let Some(s) = self.step_time_s {
            parts.push(format!("{s:.2} s/step"));
        }
        if let Some(n) = self.steps {
            parts.push(format!("{n} steps"));
        }
        parts.join(", ")
    }

    /// Two readings of one attempt (stdout and stderr) as one: the larger peaks, the figures
    /// one of them has.
    pub fn merge(a: Option<Measured>, b: Option<Measured>) -> Option<Measured> {
        let (mut a, b) = match (a, b) {
            (Some(a), Some(b)) => (a, b),
            (a, b) => return a.or(b),
        };
        let max = |x: Option<f64>, y: Option<f64>| match (x, y) {
            (Some(x), Some(y)) => Some(x.max(y)),
            (x, y) => x.or(y),
        };
        if b.peak_gib() > a.peak_gib() {
            a.source = b.source.clone();
        }
        a.peak_allocated_gib = max(a.peak_allocated_gib, b.peak_allocated_gib);
        a.peak_reserved_gib = max(a.peak_reserved_gib, b.peak_reserved_gib);
        a.tokens_per_s = a.tokens_per_s.or(b.tokens_per_s);
        a.step_time_s = a.step_time_s.or(b.step_time_s);
        a.steps = a.steps.max(b.steps);
        a.sequence_tokens = a.sequence_tokens.or(b.sequence_tokens);
        Some(a)
    }
}

/// The literals whose lines are read (any line without one costs nothing).
const NEEDLES: &[&str] = &[
    "perf/max_memory_allocated_gb",
    "perf/max_memory_reserved_gb",
    "perf/throughput",
    "timing_s/step",
    "peak_allocated_gib",
    "train-summary",
    "Memory-Usage",
    "timeperf/train_step",
    "Train step ",
    "response_length/mean",
];

fn needles() -> &'static AhoCorasick {
    static AC: OnceLock<AhoCorasick> = OnceLock::new();
    AC.get_or_init(|| AhoCorasick::new(NEEDLES).expect("the needles build"))
}

/// Longest line kept between chunks; the rest of a longer line is not read.
const LINE_MAX: usize = 64 * 1024;
/// Per-step figures kept for the median (the latest ones).
const WINDOW: usize = 256;

/// Reads one log as it grows ([`MeasureReader::feed`]), in chunks that may split lines
/// anywhere; [`MeasureReader::measured`] is what it has read so far.
#[derive(Debug, Clone)]
pub struct MeasureReader {
    label: String,
    /// Newlines seen.
    lines: u64,
    partial: Vec<u8>,
    peak_allocated: Option<f64>,
    peak_reserved: Option<f64>,
    source: Option<String>,
    rates: Vec<(u64, f64)>,
    step_times: Vec<(u64, f64)>,
    summary_rate: Option<f64>,
    steps: Option<u64>,
    lengths: Vec<(u64, f64)>,
}

impl MeasureReader {
    /// A reader for the log named `label` (as `file:line` sources name it).
    pub fn new(label: impl Into<String>) -> Self {
        MeasureReader {
            label: label.into(),
            lines: 0,
            partial: Vec::new(),
            peak_allocated: None,
            peak_reserved: None,
            source: None,
            rates: Vec::new(),
            step_times: Vec::new(),
            summary_rate: None,
            steps: None,
            lengths: Vec::new(),
        }
    }

    /// Take in the next bytes of the log.
    pub fn feed(&mut self, bytes: &[u8]) {
        let Some(last_nl) = memrchr(b'\n', bytes) else {
            self.hold(bytes);
            return;
        };
        let mut region = &bytes[..=last_nl];
        if !self.partial.is_empty() {
            let nl = memchr(b'\n', region).expect("region ends in a newline");
            let mut line = std::mem::take(&mut self.partial);
            line.extend_from_slice(&region[..nl.min(LINE_MAX)]);
            self.lines += 1;
            if needles().is_match(&line[..]) {
                self.read_line(&line, self.lines);
            }
            region = &region[nl + 1..];
        }
        let mut counted = 0; // bytes of `region` whose newlines are in `self.lines`
        let mut last_line_start = usize::MAX;
        for hit in needles().find_iter(region) {
            let start = memrchr(b'\n', &region[..hit.start()]).map_or(0, |i| i + 1);
            if start == last_line_start {
                continue;
            }
            last_line_start = start;
            let end =
                memchr(b'\n', &region[hit.start()..]).map_or(region.len(), |i| i + hit.start());
            self.lines += memchr_iter(b'\n', &region[counted..start]).count() as u64;
            counted = start;
            self.read_line(&region[start..end], self.lines + 1);
        }
        self.lines += memchr_iter(b'\n', &region[counted..]).count() as u64;
        self.partial.clear();
        self.hold(&bytes[last_nl + 1..]);
    }

    fn hold(&mut self, bytes: &[u8]) {
        let room = LINE_MAX.saturating_sub(self.partial.len());
        self.partial
            .extend_from_slice(&bytes[..bytes.len().min(room)]);
    }

    /// What the log measured so far (a last line without its newline counts); None when it
    /// reported nothing.
    pub fn measured(&self) -> Option<Measured> {
        let mut this = self.clone();
        if !this.partial.is_empty() {
            let line = std::mem::take(&mut this.partial);
            this.read_line(&line, this.lines + 1);
        }
        let m = Measured {
            peak_allocated_gib: this.peak_allocated,
            peak_reserved_gib: this.peak_reserved,
            tokens_per_s: this
                .summary_rate
                .or_else(|| median_after_first(&this.rates)),
            step_time_s: median_after_first(&this.step_times),
            steps: this.steps,
            source: this.source.clone(),
            sequence_tokens: median(&this.lengths),
        };
        (!m.is_empty()).then_some(m)
    }

    /// One line that holds a needle (any `\r`-drawn segments of it included).
    fn read_line(&mut self, line: &[u8], number: u64) {
        // A progress bar redraws with `\r`; every segment is read.
        for seg in line.split(|b| *b == b'\r') {
            self.read_segment(seg, number);
        }
    }

    fn read_segment(&mut self, seg: &[u8], number: u64) {
        let step = step_of(seg);
        if let Some(n) = step {
            self.steps = self.steps.max(Some(n));
        }
        let mut allocated = None;
        let mut reserved = None;
        if let Some(a) = number_after(seg, b"perf/max_memory_allocated_gb") {
            allocated = Some(a);
        }
        if let Some(r) = number_after(seg, b"perf/max_memory_reserved_gb") {
            reserved = Some(r);
        }
        if let Some(a) = number_after(seg, b"peak_allocated_gib") {
            allocated = Some(a);
        }
        if let Some(r) = number_after(seg, b"peak_reserved_gib") {
            reserved = Some(r);
        }
        if find(seg, b"Memory-Usage").is_some() {
            // `memory allocated (GB): X` — AReaL's unit is GB, MB or KB (binary).
            let unit = |key: &[u8]| -> Option<f64> {
                let at = find(seg, key)?;
                let rest = &seg[at + key.len()..];
                let (scale, skip) = if rest.starts_with(b" (GB)") {
                    (1.0, 5)
                } else if rest.starts_with(b" (MB)") {
                    (1.0 / 1024.0, 5)
                } else if rest.starts_with(b" (KB)") {
                    (1.0 / (1024.0 * 1024.0), 5)
                } else {
                    return None;
                };
                number_at(&rest[skip..]).map(|v| v * scale)
            };
            allocated = unit(b"memory allocated").or(allocated);
            reserved = unit(b"memory reserved").or(reserved);
        }
        let summary = find(seg, b"train-summary").is_some();
        let mut raised = false;
        if let Some(a) = allocated
            && self.peak_allocated.is_none_or(|p| a > p)
        {
            self.peak_allocated = Some(a);
            raised = true;
        }
        if let Some(r) = reserved
            && self.peak_reserved.is_none_or(|p| r > p)
        {
            self.peak_reserved = Some(r);
            raised = true;
        }
        if raised || (self.source.is_none() && (allocated.is_some() || reserved.is_some())) {
            self.source = Some(format!("{}:{number}", self.label));
        }
        if summary {
            if let Some(t) = number_after(seg, b"\"tokens_per_s\"") {
                self.summary_rate = Some(t);
            }
            return;
        }
        let at = step.unwrap_or(self.steps.unwrap_or(0));
        if let (Some(r), Some(p)) = (
            number_after(seg, b"response_length/mean"),
            number_after(seg, b"prompt_length/mean"),
        ) {
            push(&mut self.lengths, (at, r + p));
        }
        let rate = number_after(seg, b"perf/throughput").or_else(|| {
            // train.py's `tokens/s N` (not `tok/s`, nor a key that merely ends so).
            find(seg, b"peak_allocated_gib").and(number_after(seg, b" tokens/s"))
        });
        if let Some(t) = rate {
            push(&mut self.rates, (at, t));
        }
        let time = number_after(seg, b"timing_s/step")
            .or_else(|| number_after(seg, b"timeperf/train_step"));
        if let Some(s) = time {
            push(&mut self.step_times, (at, s));
        }
    }
}

/// The median of the values (every step: a sequence's length is as real in the first step).
fn median(values: &[(u64, f64)]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().map(|(_, x)| *x).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

fn push(window: &mut Vec<(u64, f64)>, v: (u64, f64)) {
    if window.len() == WINDOW {
        window.remove(0);
    }
    window.push(v);
}

/// The median of the figures of steps after the first one reported (the first pays for
/// warm-up: allocator growth, kernel selection, compilation), or the first when it is alone.
fn median_after_first(values: &[(u64, f64)]) -> Option<f64> {
    let first = values.iter().map(|(s, _)| *s).min()?;
    let mut later: Vec<f64> = values
        .iter()
        .filter(|(s, _)| *s > first)
        .map(|(_, v)| *v)
        .collect();
    if later.is_empty() {
        later = values.iter().map(|(_, v)| *v).collect();
    }
    later.sort_by(f64::total_cmp);
    let n = later.len();
    Some(if n % 2 == 1 {
        later[n / 2]
    } else {
        (later[n / 2 - 1] + later[n / 2]) / 2.0
    })
}

/// The step a line reports: verl's `step:N - `, train.py's `step N loss`, AReaL's
/// `Train step N/T done`.
fn step_of(seg: &[u8]) -> Option<u64> {
    if let Some(at) = find(seg, b"Train step ") {
        return integer_at(&seg[at + 11..]);
    }
    if let Some(at) = find(seg, b"step:")
        && (at == 0
            || !seg[at - 1].is_ascii_alphanumeric() && seg[at - 1] != b'_' && seg[at - 1] != b'/')
    {
        return integer_at(&seg[at + 5..]);
    }
    // train.py: the line starts with `step N ` (after any prefix a launcher adds, `[rank0]:`).
    let mut from = 0;
    while let Some(at) = find(&seg[from..], b"step ") {
        let at = from + at;
        let word_start = at == 0 || matches!(seg[at - 1], b' ' | b':' | b']' | b'\t');
        if word_start && find(&seg[at..], b" loss ").is_some() {
            return integer_at(&seg[at + 5..]);
        }
        from = at + 5;
    }
    None
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    memchr::memmem::find(hay, needle)
}

/// The number that follows `key` past separators (`:`, `=`, spaces, quotes, table bars).
fn number_after(seg: &[u8], key: &[u8]) -> Option<f64> {
    let mut from = 0;
    while let Some(at) = find(&seg[from..], key) {
        let end = from + at + key.len();
        // A longer key that starts with this one (`timing_s/step_x`) is another key.
        if seg
            .get(end)
            .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_' || *b == b'/')
        {
            from = end;
            continue;
        }
        return number_at(&seg[end..]);
    }
    None
}

/// A decimal number (sign, exponent) at the start of `s`, past separators.
fn number_at(s: &[u8]) -> Option<f64> {
    let sep = |b: &u8| matches!(b, b' ' | b'\t' | b':' | b'=' | b'"' | b'\'' | b'|');
    let mut i = 0;
    loop {
        match s.get(i) {
            Some(b) if sep(b) => i += 1,
            // `│` (U+2502, tabulate's fancy grid) is three bytes.
            Some(0xE2) if s.get(i + 1) == Some(&0x94) => i += 3,
            _ => break,
        }
    }
    let start = i;
    let mut end = i;
    while let Some(b) = s.get(end) {
        let prev = if end > start { s[end - 1] } else { 0 };
        let ok = b.is_ascii_digit()
            || *b == b'.'
            || ((*b == b'-' || *b == b'+') && (end == start || prev == b'e' || prev == b'E'))
            || ((*b == b'e' || *b == b'E') && end > start);
        if !ok {
            break;
        }
        end += 1;
    }
    let v: f64 = std::str::from_utf8(&s[start..end]).ok()?.parse().ok()?;
    v.is_finite().then_some(v)
}

fn integer_at(s: &[u8]) -> Option<u64> {
    let end = s
        .iter()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(s.len());
    std::str::from_utf8(&s[..end]).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(log: &str) -> Measured {
        let mut r = MeasureReader::new("stdout.log");
        r.feed(log.as_bytes());
        r.measured().expect("a measurement")
    }

    /// verl's console logger (`aggregate_logger.py:concat_dict_to_str`: `step:N` then
    /// ` - key:value` with `pprint.pformat` numbers), behind Ray's actor prefix.
    #[test]
    fn verl_step_lines() {
        let log = "\
(TaskRunner pid=1234) step:1 - actor/pg_loss:0.012 - perf/max_memory_allocated_gb:41.2 - perf/max_memory_reserved_gb:45.5 - perf/throughput:900.0 - timing_s/gen:10.1 - timing_s/step:30.0
(TaskRunner pid=1234) step:2 - actor/pg_loss:0.011 - perf/max_memory_allocated_gb:43.75 - perf/max_memory_reserved_gb:47.0 - perf/throughput:1210.5 - timing_s/step:22.5
(TaskRunner pid=1234) step:3 - actor/pg_loss:0.010 - perf/max_memory_allocated_gb:43.5 - perf/max_memory_reserved_gb:47.0 - perf/throughput:1190.5 - timing_s/step:23.5
";
        let m = read(log);
        assert_eq!(m.peak_allocated_gib, Some(43.75));
        assert_eq!(m.peak_reserved_gib, Some(47.0));
        assert_eq!(m.tokens_per_s, Some(1200.5)); // median of steps 2 and 3
        assert_eq!(m.step_time_s, Some(23.0));
        assert_eq!(m.steps, Some(3));
        assert_eq!(m.source.as_deref(), Some("stdout.log:2"));
    }

    /// verl's `compute_data_metrics` (`verl/trainer/ppo/metric_utils.py` at 07c9cf137) logs
    /// `response_length/mean` and `prompt_length/mean` on every step line.
    #[test]
    fn verl_sequence_lengths() {
        let log = "\
(TaskRunner pid=1234) step:1 - response_length/mean:600.0 - response_length/max:1024.0 - prompt_length/mean:200.0 - perf/throughput:900.0
(TaskRunner pid=1234) step:2 - response_length/mean:500.0 - prompt_length/mean:210.0 - perf/throughput:1000.0
(TaskRunner pid=1234) step:3 - response_length/mean:400.0 - prompt_length/mean:190.0 - perf/throughput:1100.0
";
        let m = read(log);
        assert_eq!(m.sequence_tokens, Some(710.0)); // the median of 800, 710 and 590
        // The response length alone (the simulator's lines) is not a sequence's length.
        let m = read("step:1 - response_length/mean:600.0 - perf/throughput:900.0\n");
        assert_eq!(m.sequence_tokens, None);
    }

    /// examples/torchrun/train.py lines 256-260 and 264-278.
    #[test]
    fn train_py_steps_and_summary() {
        let log = "\
loading model
step 1 loss 10.3712 tokens/s 20000 peak_allocated_gib 31.42 peak_reserved_gib 33.10
step 2 loss 10.2001 tokens/s 48213 peak_allocated_gib 31.42 peak_reserved_gib 33.10
step 3 loss 10.1001 tokens/s 48000 peak_allocated_gib 31.50 peak_reserved_gib 33.10
";
        let m = read(log);
        assert_eq!(m.peak_allocated_gib, Some(31.5));
        assert_eq!(m.tokens_per_s, Some(48106.5));
        assert_eq!(m.steps, Some(3));
        assert_eq!(m.source.as_deref(), Some("stdout.log:4"));
        let summary = format!(
            "{log}train-summary {{\"params\": 124000000, \"micro_batch_size\": 8, \"peak_allocated_gib\": 31.5, \"peak_reserved_gib\": 33.1, \"tokens_per_s\": 48100.0, \"device\": \"NVIDIA H100 80GB HBM3\"}}\n"
        );
        let m = read(&summary);
        assert_eq!(m.tokens_per_s, Some(48100.0));
        assert_eq!(m.peak_reserved_gib, Some(33.1));
        // A summary with no rate (`None` → JSON null) leaves the steps' median.
        let m = read(&format!(
            "{log}train-summary {{\"peak_allocated_gib\": 31.5, \"tokens_per_s\": null}}\n"
        ));
        assert_eq!(m.tokens_per_s, Some(48106.5));
    }

    /// AReaL v1.0.4: `DeviceRuntimeInfo.log` (`areal/api/io_struct.py:406-417`) behind its
    /// logger's header, `StatsLogger.commit` (`areal/utils/stats_logger.py:136-150`) and the
    /// tabulate fancy grid of its stats (`areal/utils/printing.py`).
    #[test]
    fn areal_memory_usage_and_stats() {
        let log = "\
20250601-10:00:01.000 FSDPEngine INFO: Memory-Usage after model creation/loading: memory allocated (GB): 6.20, memory reserved (GB): 7.00, device memory used/total (GB): 9.10/79.11
20250601-10:02:01.000 StatsLogger INFO: Epoch 1/1 Step 1/50 Train step 1/50 done.
│ timeperf/train_step   │ 1.2000e+01 │ ppo_actor/update/grad_norm │ 3.1000e-01 │
20250601-10:03:01.000 FSDPEngine INFO: Memory-Usage before offload model: memory allocated (MB): 20480.00, memory reserved (MB): 40960.00, device memory used/total (MB): 50000.00/81000.00
20250601-10:04:01.000 StatsLogger INFO: Epoch 1/1 Step 2/50 Train step 2/50 done.
│ timeperf/train_step   │ 1.0000e+01 │ ppo_actor/update/grad_norm │ 3.1000e-01 │
";
        let m = read(log);
        assert_eq!(m.peak_allocated_gib, Some(20.0));
        assert_eq!(m.peak_reserved_gib, Some(40.0));
        assert_eq!(m.steps, Some(2));
        assert_eq!(m.step_time_s, Some(10.0));
        assert_eq!(m.source.as_deref(), Some("stdout.log:4"));
        // The simulator's one-line form of the same statistic.
        let m = read("Stats (2/50): rollout/n_seqs=64, timeperf/train_step=7.500\n");
        assert_eq!(m.step_time_s, Some(7.5));
    }

    /// Lines split across chunks anywhere read the same; line numbers stay right.
    #[test]
    fn chunking_does_not_change_the_reading() {
        let log = "a\n\nstep 1 loss 1.0 tokens/s 10 peak_allocated_gib 1.00 peak_reserved_gib 2.00\nb\nstep 2 loss 1.0 tokens/s 30 peak_allocated_gib 5.00 peak_reserved_gib 6.00\n\rstep 3 loss 1.0 tokens/s 20 peak_allocated_gib 4.00 peak_reserved_gib 6.00";
        let whole = read(log);
        assert_eq!(whole.source.as_deref(), Some("stdout.log:5"));
        assert_eq!(whole.steps, Some(3));
        assert_eq!(whole.tokens_per_s, Some(25.0));
        for cut in 0..log.len() {
            for cut2 in cut..log.len() {
                let mut r = MeasureReader::new("stdout.log");
                r.feed(&log.as_bytes()[..cut]);
                r.feed(&log.as_bytes()[cut..cut2]);
                r.feed(&log.as_bytes()[cut2..]);
                assert_eq!(r.measured().as_ref(), Some(&whole), "{cut} {cut2}");
            }
        }
    }

    /// Nothing measured, nothing reported; keys that only start like a measured one, a
    /// config dump and other trainers' shapes are not read as figures.
    #[test]
    fn no_figures_no_measurement() {
        let mut r = MeasureReader::new("stdout.log");
        r.feed(b"loading\nstep 1 | loss 3.1 | mem 39.2GB | tok/s 32768\ntiming_s/step_other:3.0\n");
        assert_eq!(r.measured(), None);
    }

    #[test]
    fn merge_keeps_the_larger_peak_and_its_source() {
        let a = Measured {
            peak_allocated_gib: Some(3.0),
            source: Some("stdout.log:3".into()),
            ..Default::default()
        };
        let b = Measured {
            peak_allocated_gib: Some(5.0),
            tokens_per_s: Some(9.0),
            source: Some("stderr.log:9".into()),
            ..Default::default()
        };
        let m = Measured::merge(Some(a), Some(b)).unwrap();
        assert_eq!(m.peak_allocated_gib, Some(5.0));
        assert_eq!(m.tokens_per_s, Some(9.0));
        assert_eq!(m.source.as_deref(), Some("stderr.log:9"));
        assert_eq!(Measured::merge(None, None), None);
    }
}
