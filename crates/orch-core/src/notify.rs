//! Notifications: a user command run on the events people want to hear about (a run stepped
//! down, resumed, failed or finished), with the event as JSON on its stdin and as its last
//! argument (`on_event: ["notify-send", "orch"]` in an experiment, or `--on-event CMD`).
//! The hook never holds the run up: it runs in the background and is killed after 30 s.
//! Its failures are the user's to fix (it is their command), so they are printed through the
//! output layer ([`crate::reporter::say`]) like other events, not hidden among diagnostics.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::reporter::say;

/// Run `hook` (argv) with `event`; failures are reported on stderr, never fatal.
pub fn notify(hook: &[String], event: &serde_json::Value) {
    let Some((program, args)) = hook.split_first() else {
        return;
    };
    let json = event.to_string();
    tracing::debug!(hook = ?hook, "running the on_event hook");
    let spawned = Command::new(program)
        .args(args)
        .arg(&json)
        .env("ORCH_EVENT", &json)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            say(format!(
                "orch: the on_event hook `{program}` could not start: {e}"
            ));
            return;
        }
    };
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(json.as_bytes());
    }
    let program = program.clone();
    std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match child.try_wait() {
                Ok(Some(status)) if !status.success() => {
                    say(format!(
                        "orch: the on_event hook `{program}` exited with {status}"
                    ));
                    return;
                }
                Ok(Some(_)) | Err(_) => return,
                Ok(None) if Instant::now() > deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    say(format!(
                        "orch: the on_event hook `{program}` took over 30 s; killed"
                    ));
                    return;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    });
}
