//! `orch report` on fixture runs: the page's structure for a three-attempt run (a snapshot,
//! stylesheet left out), a run still going shown so far, and a sweep with one row per member
//! where the run that took more attempts stands out. The page in a real browser is
//! `tests/report.rs` (services tier).

use std::path::Path;

use crate::support::Orch;

const RUN: &str = "diamonds-seed0-20261102-091500-3f2a";

fn fixture() -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/report")
            .join(format!("{RUN}.events.jsonl")),
    )
    .unwrap()
}

/// Put a run's events into the project's runs directory.
fn add_run(orch: &Orch, id: &str, events: &str) {
    let dir = orch.path().join(".orch/runs").join(id);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("events.jsonl"), events).unwrap();
}

/// The fixture as another run of another experiment.
fn renamed(events: &str, id: &str, experiment: &str) -> String {
    events.replace(RUN, id).replace(
        "\"experiment\":\"diamonds-seed0\"",
        &format!("\"experiment\":\"{experiment}\""),
    )
}

/// The fixture's events up to (not including) the first line containing `marker`.
fn until(events: &str, marker: &str) -> String {
    events
        .lines()
        .take_while(|l| !l.contains(marker))
        .map(|l| format!("{l}\n"))
        .collect()
}

fn page(orch: &Orch, args: &[&str]) -> String {
    let mut all = vec!["report"];
    all.extend(args);
    all.extend(["--out", "page.html"]);
    let run = orch.expect(&all, 0);
    assert!(run.stderr.contains("wrote page.html"), "{run:?}");
    std::fs::read_to_string(orch.path().join("page.html")).unwrap()
}

/// The page without its stylesheet (a file of its own, not structure).
fn structure(html: &str) -> String {
    let start = html.find("<style>").expect("a <style> element");
    let end = html.find("</style>").expect("a </style>");
    let html = format!("{}<style>[STYLE]{}", &html[..start], &html[end..]);
    // When the page was made.
    regex::Regex::new(r"made \d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC")
        .unwrap()
        .replace(&html, "made [NOW]")
        .into_owned()
}

#[test]
fn the_page_of_a_three_attempt_run() {
    let orch = Orch::new();
    add_run(&orch, RUN, &fixture());
    let html = page(&orch, &[RUN]);
    // Self-contained: no script, nothing fetched, a policy that forbids fetching.
    assert!(!html.contains("<script"), "a script in the page");
    for remote in ["http://", "https://", "//fonts.", "@import", "url("] {
        assert!(!html.contains(remote), "`{remote}` in the page");
    }
    assert!(html.contains("Content-Security-Policy\" content=\"default-src 'none'"));
    // Every attempt, its evidence with file:line, the failure's numbers against the card.
    assert_eq!(html.matches("<article class=\"attempt").count(), 3);
    assert!(html.contains("stderr.log:30"));
    assert!(html.contains("card 79.2 GiB"));
    assert!(html.contains("75.3 held + 17.7 tried GiB"));
    // What the estimator predicted (as written: past the card) and what the log measured.
    assert!(
        html.contains("94.4 GiB (does not fit, band ±11 %)"),
        "{html}"
    );
    assert!(html.contains(">measured peak</text>"), "{html}");
    assert!(html.contains("(stdout.log:48)"), "{html}");
    assert!(
        !html.contains("so far"),
        "a finished run is not shown so far"
    );
    // 4 GPUs, 12 min 28 s running: 0.83 GPU-h, failed.
    assert!(html.contains("4 GPUs · 0.83 GPU-h (failed)"), "{html}");
    let redacted = orch.redactions().apply(&structure(&html));
    insta::assert_snapshot!("report_three_attempts", redacted);
}

#[test]
fn a_running_run_is_shown_so_far_and_says_so() {
    let orch = Orch::new();
    // Attempt 2 seen running, not ended.
    let events = until(
        &fixture(),
        "\"event\":\"finished\",\"ts\":\"2026-11-02T10:11:05",
    );
    add_run(&orch, RUN, &events);
    let html = page(&orch, &[RUN]);
    assert!(html.contains("<strong>Still running.</strong>"), "{html}");
    assert!(html.contains("running · so far"), "{html}");
    assert!(html.contains("class=\"now\""), "no line at now: {html}");
    assert!(html.contains("GPU-hours so far"), "{html}");
    assert!(
        html.contains("running, attempt 2 of at most 5 (halve-micro-batch)"),
        "{html}"
    );
    // The live attempt counts nothing yet: only attempt 1's 0.83 GPU-h.
    assert!(
        html.contains("<span class=\"figure\">0.83</span>"),
        "{html}"
    );
}

#[test]
fn a_sweep_gives_one_row_per_member_and_the_outlier_stands_out() {
    let orch = Orch::new();
    let full = fixture();
    // seed0 took three attempts; seed1 and seed2 succeeded at once (the fixture's third
    // attempt alone, renumbered).
    add_run(&orch, RUN, &full);
    let third: String = full
        .lines()
        .filter(|l| {
            l.contains("\"event\":\"created\"")
                || l.contains("\"attempt\":3")
                || l.contains("\"event\":\"ended\"")
        })
        .map(|l| {
            format!(
                "{}\n",
                l.replace("\"attempt\":3", "\"attempt\":1")
                    .replace("\"resume\":true", "\"resume\":false")
            )
        })
        .collect();
    for seed in ["1", "2"] {
        let id = format!("diamonds-seed{seed}-20261102-091500-3f2{seed}");
        add_run(
            &orch,
            &id,
            &renamed(&third, &id, &format!("diamonds-seed{seed}")),
        );
    }
    let run = orch.expect(&["report", "diamonds", "--out", "sweep.html"], 0);
    assert!(
        run.stderr
            .contains("no run yet of diamonds-seed3, diamonds-seed4"),
        "{run:?}"
    );
    let html = std::fs::read_to_string(orch.path().join("sweep.html")).unwrap();
    assert!(html.contains("<h1>3 runs: sweep diamonds</h1>"), "{html}");
    let rows: Vec<&str> = html
        .split("<tr")
        .filter(|r| r.contains("class=\"chips\""))
        .collect();
    assert_eq!(rows.len(), 3, "{html}");
    assert!(rows[0].starts_with(" class=\"outlier\""), "{}", rows[0]);
    assert!(
        rows[0].contains("3 attempts, the median is 1"),
        "{}",
        rows[0]
    );
    assert!(!rows[1].contains("outlier") && !rows[2].contains("outlier"));
    // One timeline lane per run, linking to its section.
    for seed in ["0", "1", "2"] {
        assert!(
            html.contains(&format!(">diamonds-seed{seed}</text></a>")),
            "{html}"
        );
    }
}

#[test]
fn an_unknown_run_is_a_usage_error_and_writes_nothing() {
    let orch = Orch::new();
    add_run(&orch, RUN, &fixture());
    let run = orch.expect(&["report", "nope", "--out", "x.html"], 2);
    assert!(run.stderr.contains("no run `nope`"), "{run:?}");
    assert!(!orch.path().join("x.html").exists());
}

#[test]
fn a_record_from_before_orch_kept_predictions_still_has_its_failure_s_numbers() {
    // The fixture without `predicted`, `measured` and the `measured` events, as an older
    // orch wrote it.
    let old: String = fixture()
        .lines()
        .filter(|l| !l.contains("\"event\":\"measured\""))
        .map(|l| {
            let mut e: serde_json::Value = serde_json::from_str(l).unwrap();
            let e = e.as_object_mut().unwrap();
            e.remove("predicted");
            e.remove("measured");
            format!("{}\n", serde_json::to_string(e).unwrap())
        })
        .collect();
    let orch = Orch::new();
    add_run(&orch, RUN, &old);
    let html = page(&orch, &[RUN]);
    assert!(!html.contains(">predicted peak</text>"), "{html}");
    assert!(!html.contains(">measured peak</text>"), "{html}");
    assert!(html.contains("75.3 held + 17.7 tried GiB"), "{html}");
    assert!(html.contains("card 79.2 GiB"), "{html}");
}

#[test]
fn what_the_ledger_says_reaches_the_page_as_text_never_as_markup() {
    // A hostile string in every free-text field the page shows: the experiment's name, the
    // evidence line, the planner's why, a changed value, a measured figure's source.
    const HOSTILE: &str = "x\\\"><script>alert(1)</script></title><svg onload=alert(2)>";
    let events: String = fixture()
        .lines()
        .map(|l| {
            let mut e: serde_json::Value = serde_json::from_str(l).unwrap();
            let o = e.as_object_mut().unwrap();
            let hostile = serde_json::Value::String(HOSTILE.replace("\\\"", "\""));
            if o.contains_key("experiment") {
                o.insert("experiment".into(), hostile.clone());
            }
            if let Some(why) = o.get_mut("why") {
                *why = hostile.clone();
            }
            if let Some(text) = o.get_mut("evidence").and_then(|v| v.get_mut("text")) {
                *text = hostile.clone();
            }
            if let Some(changes) = o.get_mut("changes").and_then(|v| v.as_array_mut()) {
                for c in changes {
                    c["to"] = hostile.clone();
                }
            }
            if let Some(source) = o.get_mut("measured").and_then(|v| v.get_mut("source")) {
                *source = hostile.clone();
            }
            format!("{e}\n")
        })
        .collect();
    let orch = orch_with(&events);
    let html = page(&orch, &[RUN]);
    assert!(!html.contains("<script"), "markup from the ledger: {html}");
    assert!(
        !html.contains("<svg onload"),
        "markup from the ledger: {html}"
    );
    assert!(
        !html.contains("x\"><"),
        "an attribute broken out of: {html}"
    );
    // The text is there, escaped, in every place it was put.
    let escaped = "&lt;script&gt;alert(1)&lt;";
    assert!(
        html.matches(escaped).count() >= 4,
        "the hostile text, escaped, in the title, evidence, why and changes: {html}"
    );
}

/// A project with `events` as the fixture run's ledger.
fn orch_with(events: &str) -> Orch {
    let orch = Orch::new();
    add_run(&orch, RUN, events);
    orch
}
