//! Authentication that needs a person: keyboard-interactive (second factors, PAM passwords),
//! else a plain password; only when [`ConnectOptions::interactive`]. Questions go to the
//! [`Prompter`]'s `respond`, a server's instructions to its `show`.
//!
//! [`ConnectOptions::interactive`]: crate::ConnectOptions::interactive

use ssh2::{KeyboardInteractivePrompt, Prompt};

use super::{Auth, Next, PROMPT_ATTEMPTS};
use crate::error::{Libssh2, SshError};
use crate::prompt::Prompter;

impl Auth<'_> {
    /// Keyboard-interactive if the server offers it, else password; nothing when neither is
    /// offered or no one can answer.
    pub(super) fn with_prompts(&mut self) -> Result<Next, SshError> {
        let kbd = self.allows("keyboard-interactive");
        let password = self.allows("password");
        if !kbd && !password {
            return Ok(Next::TryMore);
        }
        if !self.opts.interactive {
            self.note(
                "keyboard-interactive/password: not tried (not interactive: stdin is not a terminal)",
            );
            return Ok(Next::TryMore);
        }
        if kbd {
            self.keyboard_interactive()
        } else {
            self.password()
        }
    }

    fn keyboard_interactive(&mut self) -> Result<Next, SshError> {
        let mut bridge = KbdBridge {
            prompter: self.opts.prompter.as_ref(),
            dest: self.dest,
            cancelled: false,
        };
        let mut last = String::from("not tried");
        for _ in 0..PROMPT_ATTEMPTS {
            match self
                .session
                .userauth_keyboard_interactive(self.user(), &mut bridge)
            {
                Ok(()) if self.session.authenticated() => return Ok(Next::Authenticated),
                Ok(()) => last = "accepted, but the server wants more".into(),
                Err(e) => {
                    self.stop_if_gone(&e)?;
                    last = Libssh2(&e).to_string();
                }
            }
            if bridge.cancelled {
                last = "cancelled".into();
                break;
            }
        }
        self.note(format!("keyboard-interactive: {last}"));
        Ok(self.state())
    }

    fn password(&mut self) -> Result<Next, SshError> {
        let mut last = String::from("not entered");
        let prompt = vec![(
            format!("{}@{}'s password: ", self.user(), self.target.host),
            false,
        )];
        for _ in 0..PROMPT_ATTEMPTS {
            let Some(answer) = self.opts.prompter.respond(self.dest, "", &prompt) else {
                break;
            };
            let pw = answer.into_iter().next().unwrap_or_default();
            match self.session.userauth_password(self.user(), &pw) {
                Ok(()) if self.session.authenticated() => return Ok(Next::Authenticated),
                Ok(()) => last = "accepted, but the server wants more".into(),
                Err(e) => {
                    self.stop_if_gone(&e)?;
                    last = Libssh2(&e).to_string();
                }
            }
        }
        self.note(format!("password: {last}"));
        Ok(self.state())
    }
}

/// Bridges ssh2's prompt callback to a [`Prompter`].
struct KbdBridge<'a> {
    prompter: &'a dyn Prompter,
    dest: &'a str,
    cancelled: bool,
}

impl KeyboardInteractivePrompt for KbdBridge<'_> {
    fn prompt<'b>(
        &mut self,
        _user: &str,
        instructions: &str,
        prompts: &[Prompt<'b>],
    ) -> Vec<String> {
        if !instructions.trim().is_empty() {
            self.prompter
                .show(&format!("{}: {}", self.dest, instructions.trim_end()));
        }
        if prompts.is_empty() {
            return Vec::new(); // an informational round: nothing to answer
        }
        let asked: Vec<(String, bool)> = prompts
            .iter()
            .map(|p| (p.text.to_string(), p.echo))
            .collect();
        match self.prompter.respond(self.dest, instructions, &asked) {
            Some(mut answers) => {
                answers.resize(prompts.len(), String::new());
                answers
            }
            None => {
                self.cancelled = true;
                vec![String::new(); prompts.len()]
            }
        }
    }
}
