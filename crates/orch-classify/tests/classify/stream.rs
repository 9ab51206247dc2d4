//! A log fed in pieces: the verdict never depends on where the chunks break, lines are counted
//! across chunk boundaries and carriage returns, and lines longer than the cap still classify.

use orch_classify::{FailureClass, LINE_CAP, Scanner, Verdict, classify_bytes};

use FailureClass::*;

use crate::{EXPECTED, check, read_fixture};

/// Tiny deterministic PRNG (xorshift64*) so chunking tests are reproducible.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

fn feed_in_chunks(bytes: &[u8], mut size: impl FnMut() -> usize) -> Verdict {
    let mut s = Scanner::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let n = size().clamp(1, rest.len());
        s.feed(&rest[..n]);
        rest = &rest[n..];
    }
    s.verdict()
}

#[test]
fn chunking_never_changes_the_verdict() {
    for &(name, class, line, needle) in EXPECTED {
        let bytes = read_fixture(name);
        let whole = classify_bytes(&bytes);
        check(name, &whole, class, line, needle).unwrap();
        let one = feed_in_chunks(&bytes, || 1);
        assert_eq!(one, whole, "{name}: 1-byte chunks");
        for seed in [1u64, 7, 42, 1234, 99_991] {
            let mut rng = Rng(seed);
            let v = feed_in_chunks(&bytes, || (rng.next() % 97) as usize + 1);
            assert_eq!(v, whole, "{name}: random small chunks, seed {seed}");
            let mut rng = Rng(seed);
            let v = feed_in_chunks(&bytes, || (rng.next() % 4096) as usize + 1);
            assert_eq!(v, whole, "{name}: random chunks up to 4 KiB, seed {seed}");
        }
    }
}

pub(crate) const OOM: &str =
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB.";

pub(crate) fn noise_lines(n: usize) -> String {
    (1..=n)
        .map(|i| format!("(TaskRunner pid=7) step:{i} - actor/pg_loss:0.0{i}\n"))
        .collect()
}

#[test]
fn line_numbers_across_chunk_boundaries() {
    let stream = format!("{}{OOM}\n{}", noise_lines(41), noise_lines(5));
    let bytes = stream.as_bytes();
    let oom_at = stream.find(OOM).unwrap();
    // Split points around and inside the evidence line and its neighbours' newlines.
    let splits = [
        oom_at - 1,                            // just before the preceding '\n'
        oom_at,                                // right after it: chunk 2 starts the line
        oom_at + 5,                            // inside "torch"
        oom_at + OOM.find("out").unwrap() + 1, // inside the needle
        oom_at + OOM.len(),                    // just before the line's own '\n'
        oom_at + OOM.len() + 1,                // right after it
    ];
    for split in splits {
        let mut s = Scanner::new();
        s.feed(&bytes[..split]);
        s.feed(&bytes[split..]);
        let v = s.verdict();
        assert_eq!(v.class, GpuOom, "split at {split}");
        assert_eq!(v.evidence.as_ref().unwrap().line, 42, "split at {split}");
        assert_eq!(v.evidence.unwrap().text, OOM, "split at {split}");
    }
    // Three-way split with an empty chunk in the middle.
    let mut s = Scanner::new();
    s.feed(&bytes[..oom_at + 3]);
    s.feed(b"");
    s.feed(&bytes[oom_at + 3..]);
    assert_eq!(s.verdict().evidence.unwrap().line, 42);
}

#[test]
fn crlf_and_bare_cr_do_not_count_as_lines() {
    let stream = format!("a\r\nb\r\nprogress 1\rprogress 2\r\n{OOM}\r\n");
    let v = classify_bytes(stream.as_bytes());
    assert_eq!(v.evidence.as_ref().unwrap().line, 4);
    assert_eq!(v.evidence.unwrap().text, OOM);
}

#[test]
fn trailing_partial_line_counts_and_verdict_is_repeatable() {
    let mut s = Scanner::new();
    s.feed(noise_lines(3).as_bytes());
    s.feed(b"RuntimeError: CUDA error: out of mem");
    assert_eq!(s.verdict().class, None, "needle not complete yet");
    s.feed(b"ory");
    let v = s.verdict();
    assert_eq!(v.class, GpuOom);
    assert_eq!(v.evidence.as_ref().unwrap().line, 4);
    assert_eq!(
        s.verdict(),
        v,
        "verdict() must not consume the partial line"
    );
    s.feed(b"\nnext line\n");
    assert_eq!(
        s.verdict(),
        v,
        "completing the line must not change the verdict"
    );
}

#[test]
fn line_longer_than_the_cap_still_classifies() {
    // A tqdm line that never ends: 3x the cap of `\r` segments, the OOM in the middle
    // (straddling the first cap boundary), more segments after, then normal lines.
    let seg = "Training:  45%|████▌     | 450/1000 [10:05<12:20,  1.35s/it]\r";
    let needle_at = OOM.find("CUDA out of memory").unwrap();
    // Put the OOM segment so that its needle straddles byte LINE_CAP of the line.
    let target = LINE_CAP - needle_at - 9;
    let mut long = String::new();
    while long.len() + seg.len() < target {
        long.push_str(seg);
    }
    long.push_str(&"x".repeat(target - long.len() - 1));
    long.push('\r');
    assert_eq!(long.len(), target);
    long.push_str(OOM);
    long.push('\r');
    while long.len() < 3 * LINE_CAP {
        long.push_str(seg);
    }
    let stream = format!("{}{long}\n{}", noise_lines(2), noise_lines(3));
    let bytes = stream.as_bytes();

    let whole = classify_bytes(bytes);
    assert_eq!(whole.class, GpuOom);
    let ev = whole.evidence.clone().unwrap();
    assert_eq!(ev.line, 3);
    assert_eq!(ev.text, OOM, "evidence is the matching \\r-segment only");

    for size in [1usize, 3, 1000, 4096, LINE_CAP - 1, LINE_CAP + 1] {
        assert_eq!(feed_in_chunks(bytes, || size), whole, "chunk size {size}");
    }

    // The line after the long one keeps counting correctly.
    let after = format!("{}{long}\n{OOM}\n", noise_lines(2)).replacen(OOM, "no oom here", 1);
    let v = feed_in_chunks(after.as_bytes(), || 777);
    assert_eq!(v.class, GpuOom);
    assert_eq!(v.evidence.unwrap().line, 4);
}

#[test]
fn needle_split_between_a_partial_line_and_a_big_chunk_of_the_same_line() {
    // Chunk 1 leaves an unterminated line ending in "...CUDA out"; chunk 2 continues that
    // line with " of memory" and far more than the cap before any newline.
    let head = format!(
        "{}{}RuntimeError: CUDA out",
        noise_lines(1),
        "y".repeat(LINE_CAP - 100)
    );
    let tail = format!(" of memory {}\nnext\n", "z".repeat(2 * LINE_CAP));
    let mut s = Scanner::new();
    s.feed(head.as_bytes());
    s.feed(tail.as_bytes());
    let v = s.verdict();
    assert_eq!(v.class, GpuOom);
    let ev = v.evidence.unwrap();
    assert_eq!(ev.line, 2);
    assert!(
        ev.text.contains("RuntimeError: CUDA out of memory"),
        "{:?}",
        ev.text
    );
}

#[test]
fn long_line_without_carriage_returns_gets_a_windowed_evidence() {
    let filler = "x".repeat(3 * LINE_CAP);
    let stream = format!("{filler} RuntimeError: CUDA out of memory {filler}\n");
    let v = feed_in_chunks(stream.as_bytes(), || 8191);
    assert_eq!(v.class, GpuOom);
    let ev = v.evidence.unwrap();
    assert_eq!(ev.line, 1);
    assert!(
        ev.text.contains("RuntimeError: CUDA out of memory"),
        "{:?}",
        ev.text
    );
    assert!(
        ev.text.chars().count() <= 402,
        "{} chars",
        ev.text.chars().count()
    );
}

/// A traceback pasted from its frames (its header cut) that ends the log is the process's last
/// words: `error`, on the exception line, however the log is cut into chunks (a last line
/// without its newline too) and behind a Ray actor's prefix. Not when other output stands
/// between the frame and the exception-looking line, nor for such a line with no frame above.
#[test]
fn a_traceback_without_its_header_that_ends_the_log_is_an_error() {
    let cut = "step 7 loss 1.25\n  File \"/x/train.py\", line 10, in main\n    model.load_state_dict(sd)\n  File \"/torch/nn/modules/module.py\", line 2041, in load_state_dict\n    raise RuntimeError(msg)\n                       ^^^\nRuntimeError: Error(s) in loading state_dict for Model:\n";
    let ray = "(TaskRunner pid=12)   File \"/x/main.py\", line 3, in run\n(TaskRunner pid=12)     ray.get(x)\n(TaskRunner pid=12) ray.exceptions.RayTaskError(ValueError): ray::main_task() (pid=1, ip=2)";
    for (log, line) in [(cut, 7), (cut.trim_end(), 7), (ray, 3)] {
        for size in [1, 7, 64, 4096] {
            let v = feed_in_chunks(log.as_bytes(), || size);
            assert_eq!(v.class, Error, "{log:?} in chunks of {size}");
            let ev = v.evidence.expect("evidence");
            assert_eq!(ev.line, line, "{log:?}");
            assert_eq!(ev.rule.as_deref(), Some("python-traceback-tail"));
        }
    }
    for log in [
        "  File \"a.py\", line 1, in f\n    g()\nsome other output\nValueError: x\n",
        "step 1 loss 2.0\nValueError: nope\n",
        "  File \"a.py\", line 1, in f\n    g()\nValueError: x\nstep 2 loss 1.0\n",
    ] {
        assert_eq!(classify_bytes(log.as_bytes()).class, None, "{log:?}");
    }
}

/// An exit status of 137 (SIGKILL) is a likely host OOM only when nothing ended the job before
/// it: after a runner's report that another of its containers failed with another status, or
/// that it kills the job's containers, it is that teardown's (Determined). Alone, after a
/// kill's own 137, after an unrelated `exit code 1` (a build, a probe), or before a teardown,
/// it stays a host OOM.
#[test]
fn an_exit_137_after_another_failure_is_its_teardown() {
    let first_failed = "INFO: container failed with non-zero exit code:  (exit code 1)\nINFO: container failed with non-zero exit code:  (exit code 137)\n";
    let runner_killed = "killing container id: b8fb8292\nunexpected failure of trial: container failed with non-zero exit code: 137 (exit code 137)\n";
    for log in [first_failed, runner_killed] {
        for size in [1, 9, 4096] {
            let v = feed_in_chunks(log.as_bytes(), || size);
            assert_ne!(v.class, HostOom, "{log:?} in chunks of {size}");
        }
    }
    for log in [
        "worker exited with exit code 137\n",
        "Exit Code: 137\nkilling container id: b8fb8292\n",
        "exit code 137\nexit code 137\n",
        // An earlier exit status that is no runner's report of a member: a build, a probe.
        "  \u{2502} exit code: 1\nProcess exited with exit code 137\n",
        "DEBUG: probe nvidia-smi finished with exit code 9\nworker exited with exit code 137\n",
    ] {
        assert_eq!(classify_bytes(log.as_bytes()).class, HostOom, "{log:?}");
    }
}

/// A notebook kernel that Jupyter found dead and restarted is a likely host OOM (weak, like a
/// bare SIGKILL), unless the log names a crash of the process anywhere — above or below it:
/// Colab's runtime log lists its newest line first. A note that calls such a crash harmless
/// names none.
#[test]
fn a_restarted_kernel_is_a_weak_host_oom_unless_a_crash_explains_it() {
    let restarted = "[I 05:07:30.348 NotebookApp] KernelRestarter: restarting kernel (1/5)\n";
    assert_eq!(classify_bytes(restarted.as_bytes()).class, HostOom);
    let noted = format!("Note: a free(): invalid pointer at exit is harmless\n{restarted}");
    assert_eq!(classify_bytes(noted.as_bytes()).class, HostOom);
    for log in [
        format!("{restarted}src/tcmalloc.cc:283] Attempt to free invalid pointer 0x7f82050\n"),
        format!("free(): invalid pointer\n{restarted}"),
        format!("Fatal Python error: Segmentation fault\n{restarted}"),
        // The crash is seen even when another error filled its slot first.
        format!(
            "RuntimeError: CUDA error: an illegal memory access was encountered\nfree(): invalid pointer\n{restarted}"
        ),
    ] {
        for size in [1, 13, 4096] {
            let v = feed_in_chunks(log.as_bytes(), || size);
            assert_ne!(v.class, HostOom, "{log:?} in chunks of {size}");
        }
    }
}
