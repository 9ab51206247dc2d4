//! Where to connect: [`Target`] and [`resolve`], which reads `~/.ssh/config` like OpenSSH.

use std::fmt;
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use ssh2_config::{ParseRule, SshConfig};

use crate::error::SshError;

/// How deep ProxyJump may nest (a jump host that itself needs a jump host, ...). Also what
/// stops a loop of aliases that jump through each other.
const MAX_JUMP_DEPTH: usize = 8;

/// Key files tried, in this order, when the config names no IdentityFile (as OpenSSH does,
/// less the DSA and security-key kinds).
pub const DEFAULT_IDENTITY_FILES: [&str; 3] = ["id_ed25519", "id_ecdsa", "id_rsa"];

/// One SSH destination, fully resolved: where to connect, as whom, with which keys, through
/// which jump host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The name as given (`--host`): a config alias, or the host part of `user@host:port`.
    pub alias: String,
    /// The host name or address to connect to (config `HostName`, else the alias). For a
    /// target behind a jump host, the jump host resolves it.
    pub host: String,
    /// TCP port (config `Port`, else 22).
    pub port: u16,
    /// Remote user (`user@`, else config `User`, else the local user).
    pub user: String,
    /// Private key files to try, in order: config `IdentityFile` entries, else those of
    /// [`DEFAULT_IDENTITY_FILES`] that exist in `~/.ssh`.
    pub identity_files: Vec<PathBuf>,
    /// Offer only `identity_files` keys, also from ssh-agent (config `IdentitiesOnly yes`).
    pub identities_only: bool,
    /// The host to tunnel through (config `ProxyJump`), itself fully resolved.
    pub proxy_jump: Option<Box<Target>>,
}

impl Target {
    /// A target for `user@host:port` with no keys and no jump host, for callers that do not
    /// go through `~/.ssh/config`.
    pub fn new(host: &str, port: u16, user: &str) -> Target {
        Target {
            alias: host.to_string(),
            host: host.to_string(),
            port,
            user: user.to_string(),
            identity_files: Vec::new(),
            identities_only: false,
            proxy_jump: None,
        }
    }

    /// The name this target's key has in known_hosts: `host` on port 22, else `[host]:port`
    /// (OpenSSH's convention).
    pub fn known_hosts_name(&self) -> String {
        if self.port == 22 {
            self.host.clone()
        } else {
            format!("[{}]:{}", self.host, self.port)
        }
    }

    /// `user@host:port`, without the alias and the jump hosts.
    pub fn address(&self) -> String {
        if self.host.contains(':') {
            format!("{}@[{}]:{}", self.user, self.host, self.port)
        } else {
            format!("{}@{}:{}", self.user, self.host, self.port)
        }
    }
}

/// `alias (user@host:port via jump)`, the form every [`SshError`] uses to name a destination.
impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let address = self.address();
        let mut jumps = Vec::new();
        let mut hop = self.proxy_jump.as_deref();
        while let Some(j) = hop {
            jumps.push(j.alias.as_str());
            hop = j.proxy_jump.as_deref();
        }
        let via = if jumps.is_empty() {
            String::new()
        } else {
            format!(" via {}", jumps.join(" via "))
        };
        if self.alias != self.host || !via.is_empty() {
            write!(f, "{} ({address}{via})", self.alias)
        } else {
            write!(f, "{address}")
        }
    }
}

/// Resolve a `--host` value into a [`Target`], the way `ssh HOST` would.
///
/// `host` is a `~/.ssh/config` alias or `[user@]host[:port]` (also `ssh://user@host:port` and
/// `[v6addr]:port`). The host part is looked up in `home/.ssh/config` (parsed by the
/// `ssh2-config` crate; a missing file is an empty config; options it does not know are
/// ignored, as are `Match` blocks and `/etc/ssh/ssh_config`), which supplies `HostName` (with
/// `%h`), `User`, `Port`, `IdentityFile` (with `~`, `%d`, `%u`, `%h`, `%r`), `IdentitiesOnly`
/// and `ProxyJump`
/// (`none`, one host, or a comma-separated chain, each resolved through the same config).
/// A user or port in `host` wins over the config. The user defaults to `$USER`, else the
/// local account name. A host (or jump host) whose config sets `ProxyCommand` and no
/// `ProxyJump` is refused with [`SshError::Config`], naming the command: orch does not run
/// it, and connecting straight to the host instead would reach another machine or none.
pub fn resolve(host: &str, home: &Path) -> Result<Target, SshError> {
    let config = load_config(home)?;
    let local_user = local_user();
    resolve_in(&config, host, home, &local_user, 0)
}

/// A `[user@]host[:port]` destination, taken apart.
#[derive(Debug, PartialEq, Eq)]
struct Destination {
    user: Option<String>,
    host: String,
    port: Option<u16>,
}

fn parse_destination(spec: &str) -> Result<Destination, SshError> {
    let bad = |reason: &str| SshError::Destination {
        spec: spec.to_string(),
        reason: reason.to_string(),
    };
    let mut rest = spec.trim();
    if let Some(uri) = rest.strip_prefix("ssh://") {
        rest = uri.strip_suffix('/').unwrap_or(uri);
    }
    if rest.is_empty() {
        return Err(bad("it is empty"));
    }
    let (user, hostport) = match rest.rsplit_once('@') {
        Some(("", h)) => {
            return Err(bad(&format!("no user name before '@' in {h:?}")));
        }
        Some((u, h)) => (Some(u.to_string()), h),
        None => (None, rest),
    };
    let (host, port) = if let Some(inner) = hostport.strip_prefix('[') {
        let (h, after) = inner
            .split_once(']')
            .ok_or_else(|| bad("'[' without a closing ']'"))?;
        match after {
            "" => (h, None),
            p => (
                h,
                Some(
                    p.strip_prefix(':')
                        .ok_or_else(|| bad("expected ':PORT' after ']'"))?,
                ),
            ),
        }
    } else {
        match hostport.split_once(':') {
            // More than one ':' is a bare IPv6 address, which cannot carry a port.
            Some((h, p)) if !p.contains(':') => (h, Some(p)),
            _ => (hostport, None),
        }
    };
    if host.is_empty() {
        return Err(bad("no host name"));
    }
    if host.starts_with('-') || host.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(bad(
            "the host name may not start with '-' or contain spaces",
        ));
    }
    let port = match port {
        None => None,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 => Some(n),
            _ => return Err(bad(&format!("{p:?} is not a port number (1-65535)"))),
        },
    };
    Ok(Destination {
        user,
        host: host.to_string(),
        port,
    })
}

fn load_config(home: &Path) -> Result<SshConfig, SshError> {
    let path = home.join(".ssh").join("config");
    let file = match File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(SshConfig::default()),
        Err(e) => {
            return Err(SshError::Config {
                path,
                message: e.to_string(),
            });
        }
    };
    SshConfig::default()
        .home_dir(home)
        .parse(
            &mut BufReader::new(file),
            ParseRule::ALLOW_UNKNOWN_FIELDS | ParseRule::ALLOW_UNSUPPORTED_FIELDS,
        )
        .map_err(|e| SshError::Config {
            path,
            message: e.to_string(),
        })
}

fn resolve_in(
    config: &SshConfig,
    spec: &str,
    home: &Path,
    local_user: &str,
    depth: usize,
) -> Result<Target, SshError> {
    if depth > MAX_JUMP_DEPTH {
        return Err(SshError::Destination {
            spec: spec.to_string(),
            reason: format!(
                "ProxyJump nests more than {MAX_JUMP_DEPTH} hosts deep; do the jump hosts jump through each other?"
            ),
        });
    }
    let dest = parse_destination(spec)?;
    let params = config.query(&dest.host);
    let host = match &params.host_name {
        Some(h) => expand_tokens(h, &[('h', &dest.host)]),
        None => dest.host.clone(),
    };
    let user = dest
        .user
        .clone()
        .or_else(|| params.user.clone())
        .unwrap_or_else(|| local_user.to_string());
    let port = dest.port.or(params.port).unwrap_or(22);
    let home_str = home.to_string_lossy();
    let identity_files = match &params.identity_file {
        Some(files) => files
            .iter()
            .map(|p| {
                PathBuf::from(expand_tokens(
                    &p.to_string_lossy(),
                    &[
                        ('d', &home_str),
                        ('u', local_user),
                        ('h', &host),
                        ('r', &user),
                    ],
                ))
            })
            .collect(),
        None => DEFAULT_IDENTITY_FILES
            .iter()
            .map(|name| home.join(".ssh").join(name))
            .filter(|p| p.is_file())
            .collect(),
    };
    if params.proxy_jump.is_none()
        && let Some(command) = params
            .unsupported_fields
            .get("proxycommand")
            .filter(|args| !matches!(args.as_slice(), [none] if none.eq_ignore_ascii_case("none")))
    {
        return Err(SshError::Config {
            path: home.join(".ssh").join("config"),
            message: proxy_command_refused(&dest.host, command),
        });
    }
    let proxy_jump = match &params.proxy_jump {
        None => None,
        Some(hops) if hops.iter().all(|h| h.eq_ignore_ascii_case("none")) => None,
        Some(hops) => {
            // `ProxyJump a,b`: connect to a, through it to b, through b to the target.
            let mut previous: Option<Box<Target>> = None;
            for (i, hop) in hops.iter().enumerate() {
                let mut jump = resolve_in(config, hop, home, local_user, depth + 1)?;
                if i > 0 {
                    jump.proxy_jump = previous.take();
                }
                previous = Some(Box::new(jump));
            }
            previous
        }
    };
    // Options ssh2-config parses but does not model are kept by name, lower-cased.
    let identities_only = params
        .unsupported_fields
        .get("identitiesonly")
        .and_then(|v| v.first())
        .is_some_and(|v| v.eq_ignore_ascii_case("yes"));
    Ok(Target {
        alias: dest.host,
        host,
        port,
        user,
        identity_files,
        identities_only,
        proxy_jump,
    })
}

/// Why a host with a `ProxyCommand` is refused, and what to write instead: the `ProxyJump` a
/// plain `ssh -W %h:%p JUMP` amounts to, when the command is one.
fn proxy_command_refused(host: &str, command: &[String]) -> String {
    let shown = command.join(" ");
    let instead = match jump_of(command) {
        Some(jump) => format!("it is `ssh -W` through {jump}: write `ProxyJump {jump}` instead"),
        None => "a host reached through another SSH host takes `ProxyJump` instead; \
                 other proxies (SOCKS or HTTP tunnels, cloud session managers) are not supported"
            .to_string(),
    };
    format!(
        "host {host:?} uses ProxyCommand `{shown}`, which orch does not run (it connects over \
         its own socket, and only ProxyJump is supported); {instead}"
    )
}

/// The jump host of a `ProxyCommand` that is `ssh [-q] [-l USER] [-p PORT] -W %h:%p HOST`
/// (options in any order), as ProxyJump writes it (`USER@HOST:PORT`).
fn jump_of(command: &[String]) -> Option<String> {
    let (program, args) = command.split_first()?;
    if program != "ssh" && !program.ends_with("/ssh") {
        return None;
    }
    let (mut host, mut user, mut port, mut forwards) = (None, None, None, false);
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "-W" => forwards = args.next().is_some_and(|w| w == "%h:%p"),
            "-l" => user = Some(args.next()?),
            "-p" => port = Some(args.next()?),
            "-q" | "-T" | "-x" | "-a" | "-4" | "-6" | "-C" => {}
            a if a.starts_with('-') || host.is_some() => return None,
            a => host = Some(a),
        }
    }
    let host = host.filter(|_| forwards)?;
    let mut jump = user.map_or(String::new(), |u| format!("{u}@"));
    jump.push_str(host);
    if let Some(p) = port {
        jump.push_str(&format!(":{p}"));
    }
    Some(jump)
}

/// Replace `%c` tokens from `values`, and `%%` with `%`. Unknown tokens stay as they are.
fn expand_tokens(text: &str, values: &[(char, &str)]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('%') => out.push('%'),
            Some(t) => match values.iter().find(|(k, _)| *k == t) {
                Some((_, v)) => out.push_str(v),
                None => {
                    out.push('%');
                    out.push(t);
                }
            },
            None => out.push('%'),
        }
    }
    out
}

/// `$USER`, else the name of the current uid in the password database, else "root" for uid 0.
pub(crate) fn local_user() -> String {
    if let Ok(u) = std::env::var("USER")
        && !u.is_empty()
    {
        return u;
    }
    passwd_name().unwrap_or_else(|| "root".to_string())
}

/// The name of the current uid in the password database.
fn passwd_name() -> Option<String> {
    nix::unistd::User::from_uid(nix::unistd::Uid::current())
        .ok()
        .flatten()
        .map(|u| u.name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(user: Option<&str>, host: &str, port: Option<u16>) -> Destination {
        Destination {
            user: user.map(str::to_string),
            host: host.to_string(),
            port,
        }
    }

    #[test]
    fn parses_destinations() {
        assert_eq!(parse_destination("h").unwrap(), d(None, "h", None));
        assert_eq!(parse_destination("u@h").unwrap(), d(Some("u"), "h", None));
        assert_eq!(
            parse_destination("u@h:2222").unwrap(),
            d(Some("u"), "h", Some(2222))
        );
        assert_eq!(
            parse_destination("ssh://u@h:22/").unwrap(),
            d(Some("u"), "h", Some(22))
        );
        assert_eq!(
            parse_destination("[::1]:2200").unwrap(),
            d(None, "::1", Some(2200))
        );
        assert_eq!(
            parse_destination("fe80::1").unwrap(),
            d(None, "fe80::1", None)
        );
        assert_eq!(
            parse_destination("a@b@h").unwrap(),
            d(Some("a@b"), "h", None)
        );
        for bad in [
            "",
            "@h",
            "u@",
            "h:0",
            "h:99999",
            "h:x",
            "[::1",
            "-oProxyCommand=x",
            "a b",
        ] {
            assert!(parse_destination(bad).is_err(), "{bad:?} should be refused");
        }
    }

    /// `home/.ssh/config` holding `text`.
    fn home_with_config(text: &str) -> tempfile::TempDir {
        let home = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(home.path().join(".ssh")).unwrap();
        std::fs::write(home.path().join(".ssh/config"), text).unwrap();
        home
    }

    #[test]
    fn a_proxy_command_is_refused_by_name_never_ignored() {
        let home = home_with_config(
            "Host gpu\n  HostName 10.0.0.5\n  ProxyCommand ssh -q -W %h:%p carol@bastion\n\
             Host odd\n  ProxyCommand corkscrew proxy 8080 %h %p\n\
             Host via\n  ProxyJump odd\n\
             Host direct\n  ProxyCommand none\n\
             Host both\n  ProxyJump bastion\n  ProxyCommand ssh -W %h:%p other\n",
        );
        let err = resolve("gpu", home.path()).unwrap_err();
        assert!(matches!(err, SshError::Config { .. }), "{err}");
        let text = err.to_string();
        for words in [
            ".ssh/config",
            "\"gpu\"",
            "ProxyCommand `ssh -q -W %h:%p carol@bastion`",
            "`ProxyJump carol@bastion`",
        ] {
            assert!(text.contains(words), "{words:?} not in: {text}");
        }
        let err = resolve("odd", home.path()).unwrap_err().to_string();
        assert!(err.contains("corkscrew proxy 8080 %h %p"), "{err}");
        assert!(err.contains("not supported"), "{err}");
        // A jump host's own ProxyCommand is refused as well.
        let err = resolve("via", home.path()).unwrap_err().to_string();
        assert!(err.contains("\"odd\" uses ProxyCommand"), "{err}");
        // `ProxyCommand none` is no proxy; with a ProxyJump, the jump is what orch uses.
        assert_eq!(resolve("direct", home.path()).unwrap().proxy_jump, None);
        let both = resolve("both", home.path()).unwrap();
        assert_eq!(both.proxy_jump.unwrap().alias, "bastion");
    }

    #[test]
    fn the_jump_of_a_plain_ssh_w_command() {
        let words = |c: &str| c.split(' ').map(str::to_string).collect::<Vec<_>>();
        assert_eq!(
            jump_of(&words("ssh -W %h:%p bastion")).as_deref(),
            Some("bastion")
        );
        assert_eq!(
            jump_of(&words("/usr/bin/ssh bastion -l carol -p 2222 -W %h:%p -q")).as_deref(),
            Some("carol@bastion:2222")
        );
        for other in [
            "ssh bastion nc %h %p",
            "ssh -i key -W %h:%p bastion",
            "ssh -W %h:22 bastion",
            "nc -X 5 -x proxy:1080 %h %p",
        ] {
            assert_eq!(jump_of(&words(other)), None, "{other}");
        }
    }

    #[test]
    fn expands_tokens() {
        assert_eq!(
            expand_tokens("%h.example.com", &[('h', "gpu1")]),
            "gpu1.example.com"
        );
        assert_eq!(expand_tokens("100%% %x %", &[('h', "x")]), "100% %x %");
    }
}
