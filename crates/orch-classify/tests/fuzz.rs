//! Property tests: the classifier never panics, whatever a log holds — random bytes, or real
//! log fragments shuffled, truncated and filled with absurd numbers (a bounded number of
//! cases, 256 each, so the suite stays fast).

use proptest::prelude::*;

/// Pieces of real failure output, to build logs that reach deep into the parsers.
const FRAGMENTS: &[&str] = &[
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ",
    " GiB. GPU 0 has a total capacity of ",
    " GiB of which ",
    " MiB is free. Including non-PyTorch memory, this process has ",
    " GiB memory in use. Of the allocated memory ",
    " GiB is allocated by PyTorch, and ",
    " GiB is reserved by PyTorch but unallocated.",
    "Process 12345 has ",
    " GiB memory in use. ",
    "(WorkerDict pid=4242) ",
    "[rank3]: ",
    "Traceback (most recent call last):\n",
    "  File \"/x/verl/workers/fsdp_workers.py\", line 12, in update_actor\n",
    "ValueError: Free memory on device (",
    "/",
    " GiB) on startup is less than desired GPU memory utilization (0.6, ",
    " GiB).",
    "To serve at least one request with the models's max seq len (",
    "), (",
    " GiB KV cache is needed, which is larger than the available KV cache memory (",
    "estimated maximum model length is ",
    "Not enough memory. Please try to increase --mem-fraction-static.",
    "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=1.batch.",
    "*** JOB 7 ON node CANCELLED AT 2026-01-01T00:00:00 DUE TO TIME LIMIT ***",
    "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.",
    "Memory on the node (IP: 10.0.0.1, ID: ab) where the task was running was ",
    "GB / ",
    "GB (0.95), which exceeds the memory usage threshold of 0.95.",
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
    "Root Cause (first observed failure):",
    "E1122 10:00:00.000000 1 ProcessGroupNCCL.cpp:1] Watchdog caught collective operation timeout",
    "notes: \"",
    "\"",
    "# to avoid torch.OutOfMemoryError, lower the batch",
    "\n",
    "\r\n",
    "",
];

const NUMBERS: &[&str] = &[
    "0",
    "17.68",
    "1e999",
    "-3",
    "NaN",
    "inf",
    "99999999999999999999999999",
    "0.000001",
    "",
    ".",
    "1.2.3",
    "18446744073709551616",
];

/// Every line of the runtimes' vocabulary and every decoration's example (the data the rules
/// and the peeler were written from), so that pieces of one land inside another: a rule's
/// match that starts inside what the peeler took for a decoration once panicked.
fn data_fragments() -> Vec<String> {
    let column = |text: &str, k: usize| -> Vec<String> {
        text.lines()
            .skip(1)
            .filter_map(|l| l.split('\t').nth(k))
            .map(|f| f.replace("\\x1b", "\x1b"))
            .collect()
    };
    let mut all = column(include_str!("../data/vocabulary.tsv"), 1);
    all.extend(column(include_str!("../data/decorations.tsv"), 4));
    all.extend(FRAGMENTS.iter().map(|f| f.to_string()));
    all
}

fn log_text() -> impl Strategy<Value = String> {
    prop::collection::vec(
        (
            prop::sample::select(data_fragments()),
            prop::sample::select(NUMBERS),
            prop::sample::select(&["", "\n", " "][..]),
        ),
        0..60,
    )
    .prop_map(|parts| {
        parts
            .into_iter()
            .flat_map(|(f, n, sep)| [f, n.to_string(), sep.to_string()])
            .collect::<String>()
    })
}

#[test]
fn a_match_inside_a_decoration_never_panics() {
    // The peeler took `[enforce fail at CPUAllocator.cpp:56] ` for a source location; the
    // host allocator's rule matches from its first byte.
    let v = orch_classify::classify_bytes(
        b"[enforce fail at CPUAllocator.cpp:56] posix_memalign(&data, gAlignment,\n",
    );
    assert_eq!(v.class, orch_classify::FailureClass::None, "{v:?}");
}

proptest! {
    // proptest's default: 256 cases; `PROPTEST_CASES=20000` for a longer hunt.
    #![proptest_config(ProptestConfig::default())]

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..8192)) {
        let _ = orch_classify::classify_bytes(&bytes);
    }

    #[test]
    fn shuffled_real_fragments_never_panic(text in log_text()) {
        let v = orch_classify::classify_bytes(text.as_bytes());
        // Whatever it decides, its numbers are numbers a person can read.
        if let Some(m) = &v.memory {
            let summary = m.summary();
            prop_assert!(!summary.contains("NaN"), "{summary}");
        }
    }

    #[test]
    fn a_log_cut_anywhere_never_panics(text in log_text(), cut in any::<prop::sample::Index>()) {
        let bytes = text.as_bytes();
        let at = cut.index(bytes.len() + 1);
        let _ = orch_classify::classify_bytes(&bytes[..at]);
    }
}
