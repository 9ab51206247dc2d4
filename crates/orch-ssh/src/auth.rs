//! User authentication: ssh-agent, key files, then (only when interactive) keyboard-interactive
//! or password, with a [`Prompter`] for passphrases and one-time codes.

use std::fs;
use std::io::{self, BufRead, Write};
use std::path::Path;

use ssh2::{ErrorCode, KeyboardInteractivePrompt, Prompt, Session};

use super::error::Libssh2;
use super::{ConnectOptions, SshError, Target, b64};

/// How many times to ask for a passphrase, a password or a keyboard-interactive round (as
/// OpenSSH's NumberOfPasswordPrompts).
const PROMPT_ATTEMPTS: usize = 3;

/// Asks the user for secrets during authentication. Only used when
/// [`ConnectOptions::interactive`] is true. Returning `None` cancels that method.
pub trait Prompter: Send + Sync {
    /// The passphrase of an encrypted private key file.
    fn passphrase(&self, key: &Path) -> Option<String>;
    /// Answers to a keyboard-interactive round (a password, a one-time code, ...): one per
    /// prompt, `(text, echo)`; `echo` false means a secret. `dest` names the host.
    /// `instructions` may be empty. Also used for plain password authentication.
    fn respond(
        &self,
        dest: &str,
        instructions: &str,
        prompts: &[(String, bool)],
    ) -> Option<Vec<String>>;
}

/// The default [`Prompter`]: reads from the controlling terminal (`/dev/tty`), echoing only
/// what the server marks as not secret; secrets go through `rpassword`.
#[derive(Debug, Default, Clone, Copy)]
pub struct TtyPrompter;

impl Prompter for TtyPrompter {
    fn passphrase(&self, key: &Path) -> Option<String> {
        rpassword::prompt_password(format!("Enter passphrase for key '{}': ", key.display())).ok()
    }

    fn respond(
        &self,
        dest: &str,
        instructions: &str,
        prompts: &[(String, bool)],
    ) -> Option<Vec<String>> {
        if !instructions.trim().is_empty() {
            eprintln!("{dest}: {}", instructions.trim_end());
        }
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

/// Bridges ssh2's prompt callback to a [`Prompter`].
struct KbdBridge<'a> {
    prompter: &'a dyn Prompter,
    dest: &'a str,
    rounds: usize,
    cancelled: bool,
}

impl KeyboardInteractivePrompt for KbdBridge<'_> {
    fn prompt<'b>(
        &mut self,
        _user: &str,
        instructions: &str,
        prompts: &[Prompt<'b>],
    ) -> Vec<String> {
        self.rounds += 1;
        if prompts.is_empty() {
            if !instructions.trim().is_empty() {
                // An informational round: show it, nothing to answer.
                let _ = self.prompter.respond(self.dest, instructions, &[]);
            }
            return Vec::new();
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

/// Whether a private key file is encrypted: OpenSSH format with a cipher other than `none`,
/// or PEM with an `ENCRYPTED` header. `false` when it cannot tell.
pub(crate) fn key_is_encrypted(path: &Path) -> bool {
    let Ok(text) = fs::read_to_string(path) else {
        return false;
    };
    if text.contains("ENCRYPTED") {
        return true; // PEM: "Proc-Type: 4,ENCRYPTED" or "BEGIN ENCRYPTED PRIVATE KEY"
    }
    let body: String = text
        .lines()
        .skip_while(|l| !l.starts_with("-----BEGIN OPENSSH PRIVATE KEY-----"))
        .skip(1)
        .take_while(|l| !l.starts_with("-----END"))
        .collect();
    let Some(bytes) = b64::decode(&body) else {
        return false;
    };
    const MAGIC: &[u8] = b"openssh-key-v1\0";
    let Some(rest) = bytes.strip_prefix(MAGIC) else {
        return false;
    };
    let Some(len) = rest
        .get(..4)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
    else {
        return false;
    };
    rest.get(4..4 + len).is_some_and(|cipher| cipher != b"none")
}

fn session_code(e: &ssh2::Error) -> i32 {
    match e.code() {
        ErrorCode::Session(c) => c,
        ErrorCode::SFTP(_) => 0,
    }
}

/// Authenticate `session` as `target.user`. On failure, the error lists every method and key
/// tried and why it did not work.
pub(crate) fn authenticate(
    session: &Session,
    target: &Target,
    opts: &ConnectOptions,
    dest: &str,
) -> Result<(), SshError> {
    let user = target.user.as_str();
    let mut tried: Vec<String> = Vec::new();
    let mut offered = match session.auth_methods(user) {
        Ok(m) => m.to_string(),
        Err(_) if session.authenticated() => return Ok(()), // "none" was accepted
        Err(e) if super::connection::is_lost_error(&e) => {
            return Err(SshError::ConnectionLost {
                dest: dest.to_string(),
                op: "authentication".to_string(),
                message: Libssh2(&e).to_string(),
            });
        }
        Err(_) => String::new(),
    };
    let allows = |offered: &str, m: &str| offered.is_empty() || offered.split(',').any(|x| x == m);
    let fail = |tried: Vec<String>, offered: &str| SshError::Auth {
        dest: dest.to_string(),
        user: user.to_string(),
        tried,
        offered: offered.to_string(),
    };
    // After a socket error libssh2 cannot go on; say so rather than trying more methods.
    let gone = |e: &ssh2::Error, tried: &mut Vec<String>| {
        if super::connection::is_lost_error(e) {
            tried.push(format!(
                "(the server closed the connection: {}; too many keys offered? see MaxAuthTries)",
                Libssh2(e)
            ));
            true
        } else {
            false
        }
    };

    if allows(&offered, "publickey") {
        // 1. ssh-agent.
        if let Some(socket) = &opts.agent {
            match agent_identities(session, socket) {
                Err(e) => tried.push(format!(
                    "ssh-agent ({}): cannot use it: {}",
                    socket.display(),
                    Libssh2(&e)
                )),
                Ok((_, ids)) if ids.is_empty() => tried.push("ssh-agent: has no keys".to_string()),
                Ok((agent, ids)) => {
                    let usable: Vec<&ssh2::PublicKey> = if target.identities_only {
                        let wanted = public_blobs(&target.identity_files);
                        ids.iter()
                            .filter(|id| wanted.iter().any(|b| b == id.blob()))
                            .collect()
                    } else {
                        ids.iter().collect()
                    };
                    if usable.is_empty() {
                        tried.push(format!(
                            "ssh-agent: {} key(s), none of them an IdentityFile (IdentitiesOnly yes)",
                            ids.len()
                        ));
                    }
                    for id in &usable {
                        match agent.userauth(user, id) {
                            Ok(()) if session.authenticated() => return Ok(()),
                            Ok(()) => {}
                            Err(e) if gone(&e, &mut tried) => return Err(fail(tried, &offered)),
                            Err(_) => {}
                        }
                    }
                    if !usable.is_empty() {
                        tried.push(format!("ssh-agent: {} key(s), none accepted", usable.len()));
                    }
                }
            }
        } else {
            tried.push(
                "ssh-agent: not used (no agent socket: SSH_AUTH_SOCK is not set)".to_string(),
            );
        }
        // 2. Key files.
        if target.identity_files.is_empty() {
            tried.push(
                "key files: none configured (IdentityFile) and no ~/.ssh/id_{ed25519,ecdsa,rsa}"
                    .into(),
            );
        }
        for key in &target.identity_files {
            let shown = key.display();
            if !key.is_file() {
                tried.push(format!("key {shown}: no such file"));
                continue;
            }
            if !key_is_encrypted(key) {
                match session.userauth_pubkey_file(user, None, key, None) {
                    Ok(()) if session.authenticated() => return Ok(()),
                    Ok(()) => {
                        tried.push(format!("key {shown}: accepted, but the server wants more"))
                    }
                    Err(e) if gone(&e, &mut tried) => return Err(fail(tried, &offered)),
                    Err(e) => tried.push(format!("key {shown}: {}", key_failure(&e))),
                }
                continue;
            }
            if !opts.interactive {
                tried.push(format!(
                    "key {shown}: has a passphrase; not asking for it (not interactive): add it to ssh-agent"
                ));
                continue;
            }
            let mut outcome = format!("key {shown}: passphrase not entered");
            for _ in 0..PROMPT_ATTEMPTS {
                let Some(passphrase) = opts.prompter.passphrase(key) else {
                    break;
                };
                match session.userauth_pubkey_file(user, None, key, Some(&passphrase)) {
                    Ok(()) if session.authenticated() => return Ok(()),
                    Ok(()) => {
                        outcome = format!("key {shown}: accepted, but the server wants more");
                        break;
                    }
                    Err(e) if gone(&e, &mut tried) => return Err(fail(tried, &offered)),
                    // libssh2 reads the private key before talking to the server, so a file
                    // error here is a wrong passphrase.
                    Err(e) if session_code(&e) == -16 => {
                        outcome = format!("key {shown}: wrong passphrase");
                    }
                    Err(e) => {
                        outcome = format!("key {shown}: {}", key_failure(&e));
                        break;
                    }
                }
            }
            tried.push(outcome);
        }
        // A key may have been accepted as a first factor only ("partial success", as with
        // `AuthenticationMethods publickey,keyboard-interactive`); the server then offers
        // what must come next, which it did not list before.
        match session.auth_methods(user) {
            Err(_) if session.authenticated() => return Ok(()),
            Ok(now) if !now.is_empty() && now != offered => {
                if !now.split(',').any(|m| m == "publickey") {
                    tried.push(format!(
                        "(a key was accepted as the first factor; the server now asks for: {now})"
                    ));
                }
                offered = now.to_string();
            }
            _ => {}
        }
    } else {
        tried.push("public keys: the server does not accept publickey".to_string());
    }

    // 3. Keyboard-interactive (second factors, PAM passwords), else password.
    let kbd = allows(&offered, "keyboard-interactive");
    let password = allows(&offered, "password");
    if !kbd && !password {
        return Err(fail(tried, &offered));
    }
    if !opts.interactive {
        tried.push(
            "keyboard-interactive/password: not tried (not interactive: stdin is not a terminal)"
                .into(),
        );
        return Err(fail(tried, &offered));
    }
    if kbd {
        let mut bridge = KbdBridge {
            prompter: opts.prompter.as_ref(),
            dest,
            rounds: 0,
            cancelled: false,
        };
        let mut last = String::from("not tried");
        for _ in 0..PROMPT_ATTEMPTS {
            match session.userauth_keyboard_interactive(user, &mut bridge) {
                Ok(()) if session.authenticated() => return Ok(()),
                Ok(()) => last = "accepted, but the server wants more".into(),
                Err(e) if gone(&e, &mut tried) => return Err(fail(tried, &offered)),
                Err(e) => last = Libssh2(&e).to_string(),
            }
            if bridge.cancelled {
                last = "cancelled".into();
                break;
            }
        }
        tried.push(format!("keyboard-interactive: {last}"));
    } else {
        let mut last = String::from("not entered");
        let prompt = vec![(format!("{user}@{}'s password: ", target.host), false)];
        for _ in 0..PROMPT_ATTEMPTS {
            let Some(answer) = opts.prompter.respond(dest, "", &prompt) else {
                break;
            };
            let pw = answer.into_iter().next().unwrap_or_default();
            match session.userauth_password(user, &pw) {
                Ok(()) if session.authenticated() => return Ok(()),
                Ok(()) => last = "accepted, but the server wants more".into(),
                Err(e) if gone(&e, &mut tried) => return Err(fail(tried, &offered)),
                Err(e) => last = Libssh2(&e).to_string(),
            }
        }
        tried.push(format!("password: {last}"));
    }
    Err(fail(tried, &offered))
}

fn agent_identities(
    session: &Session,
    socket: &Path,
) -> Result<(ssh2::Agent, Vec<ssh2::PublicKey>), ssh2::Error> {
    let mut agent = session.agent()?;
    agent.set_identity_path(socket)?;
    agent.connect()?;
    agent.list_identities()?;
    let ids = agent.identities()?;
    Ok((agent, ids))
}

/// The public key blobs of the `.pub` files next to `keys` (for matching agent keys).
fn public_blobs(keys: &[std::path::PathBuf]) -> Vec<Vec<u8>> {
    keys.iter()
        .filter_map(|k| {
            let mut name = k.clone().into_os_string();
            name.push(".pub");
            let text = fs::read_to_string(name).ok()?;
            b64::decode(text.split_whitespace().nth(1)?)
        })
        .collect()
}

fn key_failure(e: &ssh2::Error) -> String {
    match session_code(e) {
        -18 | -19 => "refused by the server".to_string(),
        -16 => format!("cannot load it: {}", e.message()),
        _ => Libssh2(e).to_string(),
    }
}
