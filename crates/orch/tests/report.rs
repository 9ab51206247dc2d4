//! `orch report`'s page in a real browser: Debian's headless Chromium (`scripts/test.sh`
//! installs it) loads the page of the README's three-attempt demo run and takes a screenshot.
//! The page must load with no request leaving the machine and with no console message.
//!
//! How it is checked, without a driver or Node: Chromium writes a NetLog (`--log-net-log`),
//! the network stack's own record of every request it starts, and every request the page
//! started (an initiator that is an origin, unlike the browser's own update and sign-in
//! checks) must be for a local scheme; console messages are in Chromium's log on stderr
//! (`--enable-logging=stderr`, `…:CONSOLE…]` lines), and the page has no script, so any such
//! line is a failure (a CSP violation, a failed load). As a safety net every host name
//! resolves to nothing (`--host-resolver-rules`). A control page that fetches and logs proves
//! both checks fail when they should. Without Chromium the tests fail, naming the package.
//!
//! The screenshot is kept under `target/report/` (CI keeps it as an artefact); the test
//! prints its path.

#[allow(dead_code)]
mod support;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::{Orch, attempts, repo_root};

/// What Chromium did with a page.
#[derive(Debug)]
struct Load {
    /// Console messages, as Chromium logged them.
    console: Vec<String>,
    /// URLs the page asked for that are not on this machine.
    remote: Vec<String>,
    /// Chromium's stderr, for failure messages.
    log: String,
}

fn chromium() -> PathBuf {
    for name in ["chromium", "chromium-browser"] {
        if let Some(p) = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .map(|d| d.join(name))
            .find(|p| p.is_file())
        {
            return p;
        }
    }
    panic!(
        "Chromium is not installed: scripts/test.sh installs it (as root: apt-get install -y chromium); \
         this test needs a real browser and is never skipped"
    );
}

/// Open `page` in headless Chromium, `height` pixels tall, and save a screenshot to `png`.
fn load(page: &Path, png: &Path, height: u32) -> Load {
    let scratch = tempfile::tempdir().unwrap();
    let netlog = scratch.path().join("netlog.json");
    let mut child = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--host-resolver-rules=MAP * ~NOTFOUND",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!(
            "--user-data-dir={}",
            scratch.path().join("profile").display()
        ))
        .arg(format!("--log-net-log={}", netlog.display()))
        .arg(format!("--window-size=1200,{height}"))
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("chromium starts");
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        stderr.read_to_string(&mut text).ok();
        text
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(120) {
            child.kill().ok();
            panic!("chromium did not finish with {} in 120 s", page.display());
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let log = reader.join().unwrap();
    assert!(status.success(), "chromium failed ({status}):\n{log}");
    let console = log
        .lines()
        .filter(|l| l.contains(":CONSOLE"))
        .map(str::to_string)
        .collect();
    let text = std::fs::read_to_string(&netlog)
        .unwrap_or_else(|e| panic!("no NetLog at {} ({e}):\n{log}", netlog.display()));
    Load {
        console,
        remote: remote_requests(&text),
        log,
    }
}

/// Print `page` to `pdf` with Chromium, as a reader's print dialog would.
fn print_to_pdf(page: &Path, pdf: &Path) {
    let scratch = tempfile::tempdir().unwrap();
    std::fs::remove_file(pdf).ok();
    let out = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--host-resolver-rules=MAP * ~NOTFOUND",
            "--no-pdf-header-footer",
        ])
        .arg(format!("--user-data-dir={}", scratch.path().display()))
        .arg(format!("--print-to-pdf={}", pdf.display()))
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .output()
        .expect("chromium starts");
    assert!(
        out.status.success() && pdf.is_file(),
        "chromium could not print {}:\n{}",
        page.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The URLs in a NetLog that the page (not the browser itself) asked for on another machine.
fn remote_requests(netlog: &str) -> Vec<String> {
    let log: serde_json::Value = serde_json::from_str(netlog).expect("the NetLog is JSON");
    let start_job = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
        .as_u64()
        .expect("the NetLog names URL_REQUEST_START_JOB");
    let events = log["events"].as_array().expect("the NetLog has events");
    let local = ["file:", "data:", "blob:", "about:", "chrome:"];
    events
        .iter()
        .filter(|e| e["type"].as_u64() == Some(start_job))
        // The browser's own requests (updates, sign-in) have no origin behind them.
        .filter(|e| e["params"]["initiator"].as_str() != Some("not an origin"))
        .filter_map(|e| e["params"]["url"].as_str())
        .filter(|url| !local.iter().any(|s| url.starts_with(s)))
        .map(str::to_string)
        .collect()
}

/// Where screenshots are kept: `target/report/` of this workspace (or `$CARGO_TARGET_DIR`).
fn artefacts() -> PathBuf {
    let dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target"))
        .join("report");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn the_demo_run_s_page_loads_offline_with_no_console_message_and_is_screenshotted() {
    // The README's demo with preflight off: an OOM as written, the planner's step, the demo's
    // preemption, a resume that succeeds.
    let orch = Orch::new().newcomer();
    let run = orch.expect(
        &[
            "submit",
            "--backend",
            "local",
            "--preflight=off",
            "diamonds-seed0",
            "--json",
        ],
        0,
    );
    let json = run.json();
    let list = attempts(&json);
    let outcomes: Vec<&str> = list
        .iter()
        .map(|a| a["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["gpu_oom", "preempted", "succeeded"], "{run:?}");
    let id = json["run"].as_str().unwrap();
    let dir = artefacts();
    let html = dir.join("diamonds-seed0.html");
    let made = orch.expect(&["report", id, "--out", html.to_str().unwrap()], 0);
    assert!(made.stderr.contains("wrote "), "{made:?}");
    let png = dir.join("diamonds-seed0.png");
    std::fs::remove_file(&png).ok();
    let load = load(&html, &png, 2100);
    assert_eq!(
        load.remote,
        Vec::<String>::new(),
        "the page asked for something off this machine:\n{}",
        load.log
    );
    assert_eq!(
        load.console,
        Vec::<String>::new(),
        "console messages:\n{}",
        load.log
    );
    let bytes = std::fs::read(&png)
        .unwrap_or_else(|e| panic!("no screenshot at {} ({e}):\n{}", png.display(), load.log));
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    assert!(
        bytes.len() > 20_000,
        "a blank screenshot? {} bytes",
        bytes.len()
    );
    println!("screenshot: {}", png.canonicalize().unwrap().display());
    // Printable: Chromium prints it to a PDF of more than one page.
    let pdf = dir.join("diamonds-seed0.pdf");
    print_to_pdf(&html, &pdf);
    let bytes = std::fs::read(&pdf).unwrap();
    assert!(bytes.starts_with(b"%PDF-"), "not a PDF");
    let pages = regex::bytes::Regex::new(r"/Type\s*/Page\b")
        .unwrap()
        .find_iter(&bytes)
        .count();
    // The three attempts do not fit one sheet: the page breaks, it is not cut off.
    assert!(pages >= 2, "{pages} page(s) in {}", pdf.display());
}

#[test]
fn the_browser_checks_catch_a_page_that_fetches_and_logs() {
    // The control: the same checks on a page that loads a remote image and logs an error.
    let scratch = tempfile::tempdir().unwrap();
    let page = scratch.path().join("bad.html");
    std::fs::write(
        &page,
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>bad</title></head><body>\
         <img src=\"http://example.invalid/pixel.png\" alt=\"\">\
         <script>console.error(\"orch report control\")</script></body></html>",
    )
    .unwrap();
    let load = load(&page, &scratch.path().join("bad.png"), 400);
    assert_eq!(
        load.remote,
        ["http://example.invalid/pixel.png"],
        "{}",
        load.log
    );
    assert_eq!(load.console.len(), 1, "{}", load.log);
    assert!(load.console[0].contains("orch report control"), "{load:?}");
}
