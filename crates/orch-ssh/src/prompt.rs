//! [`Prompter`]: the transport's only way to the user. It asks for secrets (passphrases,
//! passwords, one-time codes) and shows what the user should read (a server's
//! keyboard-interactive instructions, a reconnect in progress). [`TtyPrompter`] is the
//! terminal; a caller with its own output layer (progress bars, a GUI, tests) passes another.

use std::fs;
use std::io::{self, BufRead, Write};
use std::path::Path;

/// Asks the user for secrets during authentication, and shows them messages.
///
/// [`Prompter::passphrase`] and [`Prompter::respond`] are only called when
/// [`crate::ConnectOptions::interactive`] is true; returning `None` cancels that method.
/// [`Prompter::show`] is called whether or not the session is interactive.
pub trait Prompter: Send + Sync {
    /// The passphrase of an encrypted private key file.
    fn passphrase(&self, key: &Path) -> Option<String>;

    /// Answers to a keyboard-interactive round (a password, a one-time code, ...): one per
    /// prompt, `(text, echo)`; `echo` false means a secret. `dest` names the host.
    /// `instructions` may be empty; they have already been passed to [`Prompter::show`].
    /// Also used for plain password authentication.
    fn respond(
        &self,
        dest: &str,
        instructions: &str,
        prompts: &[(String, bool)],
    ) -> Option<Vec<String>>;

    /// Show one message line to the user: a server's instructions (`host: text`), or a notice
    /// such as `orch: host: ...; reconnecting in 1.0s`. By default it goes to stderr.
    fn show(&self, message: &str) {
        let _ = writeln!(io::stderr().lock(), "{message}");
    }
}

/// The default [`Prompter`]: reads from the controlling terminal (`/dev/tty`), echoing only
/// what the server marks as not secret; secrets go through `rpassword`. Messages go to stderr.
#[derive(Debug, Default, Clone, Copy)]
pub struct TtyPrompter;

impl Prompter for TtyPrompter {
    fn passphrase(&self, key: &Path) -> Option<String> {
        rpassword::prompt_password(format!("Enter passphrase for key '{}': ", key.display())).ok()
    }

    fn respond(
        &self,
        _dest: &str,
        _instructions: &str,
        prompts: &[(String, bool)],
    ) -> Option<Vec<String>> {
        let mut answers = Vec::with_capacity(prompts.len());
        for (text, echo) in prompts {
            let answer = if *echo {
                read_echoed_line(text).ok()?
            } else {
                rpassword::prompt_password(text).ok()?
            };
            answers.push(answer);
        }
        Some(answers)
    }
}

fn read_echoed_line(prompt: &str) -> io::Result<String> {
    let mut tty = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")?;
    tty.write_all(prompt.as_bytes())?;
    tty.flush()?;
    let mut line = String::new();
    io::BufReader::new(tty).read_line(&mut line)?;
    Ok(line.trim_end_matches(['\r', '\n']).to_string())
}
