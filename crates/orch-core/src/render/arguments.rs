//! Trainer overrides as command-line arguments, written in the grammar of the program that
//! reads them, then quoted for the shell that runs the launch script.
//!
//! A template's `override_syntax` names the grammar ([`OverrideSyntax`]):
//!
//! - `plain`: `key=value` as one shell word; the trainer splits at the first `=` and takes the
//!   rest as it is.
//! - `hydra`: Hydra's override grammar (hydra-core 1.3, `hydra/grammar/OverrideLexer.g4`), as
//!   verl's `main_ppo` and rl-swarm's launcher parse their arguments. An unquoted value may
//!   hold letters, digits and `_-/.+@%:` only; anything else — `~`, `,` (a sweep), brackets,
//!   braces, parentheses, `=`, quotes, whitespace, `${` (an interpolation), `\`, `*`, `?`, `|`,
//!   `$` — goes in Hydra quotes with Hydra's escapes, and so does a string that Hydra would
//!   read as a number, a boolean or null. Lists and maps become Hydra lists and dicts.
//! - `hydra-rejoined`: Hydra's grammar, read twice. AReaL's launchers
//!   (`areal/infra/launcher/{local,ray,slurm}.py` at 1.0.4) parse their arguments with Hydra,
//!   then join them with spaces into a `shell=True` command for the trainer, which parses them
//!   again. Only a value that reads the same before and after that second shell passes; any
//!   other is refused before anything is submitted, naming the key.
//!
//! A string value `~` or `~/…` is a path in the home directory *of the node the job runs on*:
//! it is written as `$HOME` for the job's shell to expand there, never expanded by orch on the
//! login node. `~name/…` (another user's home) is refused: write that path in full.

pub use crate::config::template::OverrideSyntax;
use serde_yaml::Value;

/// Why an override cannot be written in its trainer's grammar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgumentError {
    pub key: String,
    pub message: String,
}

impl std::fmt::Display for ArgumentError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot pass `{}`: {}", self.key, self.message)
    }
}

/// One override as one shell word (or adjacent quoted pieces that the shell joins into one).
pub fn argument(syntax: OverrideSyntax, key: &str, value: &Value) -> Result<String, ArgumentError> {
    let fail = |message: String| ArgumentError {
        key: key.to_string(),
        message,
    };
    match syntax {
        OverrideSyntax::Plain => Ok(shell_quote(&format!(
            "{key}={}",
            crate::plan::trainer_value(value)
        ))),
        OverrideSyntax::Hydra | OverrideSyntax::HydraRejoined => {
            let rejoined = syntax == OverrideSyntax::HydraRejoined;
            if !hydra_key_ok(key, rejoined) {
                return Err(fail(
                    "Hydra takes a key of dotted parts, each a letter, `_` or `$` then letters, digits and `_-$` (or a number), with an optional `+`, `++` or `~` in front (and no `$` where AReaL's launcher shell would expand it)".into(),
                ));
            }
            if let Value::String(s) = value
                && let Some(rest) = home_relative(s).map_err(fail)?
            {
                return home_argument(key, rest, rejoined).map_err(fail);
            }
            let text = hydra_value(value).map_err(fail)?;
            if rejoined && !plain_word(&text) {
                return Err(fail(format!(
                    "AReaL's launcher joins its arguments with spaces and runs them through a shell (areal/infra/launcher/local.py, 1.0.4), so `{}` would not reach the trainer intact; use letters, digits and `_-/.+@%:` only, or set it in the experiment's AReaL config file (vars.config)",
                    crate::plan::trainer_value(value)
                )));
            }
            Ok(shell_quote(&format!("{key}={text}")))
        }
    }
}

/// `Some(rest)` for `~` (rest empty) and `~/rest`; an error for `~name/…`; `None` otherwise.
fn home_relative(s: &str) -> Result<Option<&str>, String> {
    match s.strip_prefix('~') {
        None => Ok(None),
        Some("") => Ok(Some("")),
        Some(rest) if rest.starts_with('/') => Ok(Some(rest)),
        Some(_) => Err(format!(
            "`{s}` names another user's home directory, which orch does not expand; write the path in full"
        )),
    }
}

/// `key=$HOME/rest` with `$HOME` expanded by the job's shell on the node.
fn home_argument(key: &str, rest: &str, rejoined: bool) -> Result<String, String> {
    if rejoined {
        // No quotes survive the launcher's shell: the rest must be a plain word.
        if !rest.is_empty() && !plain_word(rest) {
            return Err(format!(
                "AReaL's launcher joins its arguments with spaces and runs them through a shell (areal/infra/launcher/local.py, 1.0.4), so `~{rest}` would not reach the trainer intact; use letters, digits and `_-/.+@%:` only"
            ));
        }
        return Ok(format!(
            "{}\"$HOME\"{}",
            shell_quote(&format!("{key}=")),
            if rest.is_empty() {
                String::new()
            } else {
                shell_quote(rest)
            }
        ));
    }
    // Hydra single quotes, inside shell double quotes so that only `$HOME` expands.
    let inner = hydra_escape(rest, '\'');
    Ok(format!(
        "\"{}'$HOME{}'\"",
        double_quote_escape(&format!("{key}=")),
        double_quote_escape(&inner)
    ))
}

/// A value as Hydra's grammar reads it back unchanged.
fn hydra_value(value: &Value) -> Result<String, String> {
    match value {
        Value::Null => Ok("null".into()),
        Value::Bool(b) => Ok(b.to_string()),
        Value::Number(n) => Ok(match n.as_f64() {
            // YAML prints `.inf`/`.nan`, which Hydra would read as strings.
            Some(f) if f.is_nan() => "nan".into(),
            Some(f) if f.is_infinite() => if f > 0.0 { "inf" } else { "-inf" }.into(),
            _ => n.to_string(),
        }),
        Value::String(s) => Ok(hydra_string(s)),
        Value::Sequence(items) => {
            let parts: Result<Vec<_>, _> = items.iter().map(hydra_value).collect();
            Ok(format!("[{}]", parts?.join(",")))
        }
        Value::Mapping(map) => {
            let mut parts = Vec::new();
            for (k, v) in map {
                let key = match k {
                    Value::String(s) if hydra_dict_key_ok(s) => s.clone(),
                    Value::Number(n) => n.to_string(),
                    other => {
                        return Err(format!(
                            "a map key must be a plain word in Hydra's grammar, got {}",
                            crate::plan::trainer_value(other)
                        ));
                    }
                };
                parts.push(format!("{key}:{}", hydra_value(v)?));
            }
            Ok(format!("{{{}}}", parts.join(",")))
        }
        Value::Tagged(t) => Err(format!("a YAML tag ({}) has no Hydra form", t.tag)),
    }
}

/// A string as itself when Hydra reads it back as that string, else in Hydra double quotes.
fn hydra_string(s: &str) -> String {
    if plain_word(s) && !reads_as_other_type(s) {
        s.to_string()
    } else {
        format!("\"{}\"", hydra_escape(s, '"'))
    }
}

/// Letters, digits and `_-/.+@%:`: one token run in Hydra's value grammar, and inert in a
/// POSIX shell.
fn plain_word(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-/.+@%:".contains(&b))
}

/// Whether Hydra would read this plain word as a number, a boolean or null.
fn reads_as_other_type(s: &str) -> bool {
    let lower = s.to_ascii_lowercase();
    let unsigned = lower.trim_start_matches(['+', '-']);
    matches!(unsigned, "true" | "false" | "null" | "inf" | "nan")
        || unsigned.starts_with(|c: char| c.is_ascii_digit() || c == '.')
}

/// The body of a Hydra quoted string (`quote` is `'` or `"`): a run of backslashes before the
/// quote character or at the end is doubled, the quote escaped, and `${` (an interpolation
/// OmegaConf would resolve) escaped as `\${` after doubling the backslashes before it.
fn hydra_escape(s: &str, quote: char) -> String {
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len() + 2);
    let mut i = 0;
    while i < chars.len() {
        let start = i;
        while i < chars.len() && chars[i] == '\\' {
            i += 1;
        }
        let run = i - start;
        let next = chars.get(i).copied();
        let before_interpolation = next == Some('$') && chars.get(i + 1) == Some(&'{');
        let special = next == Some(quote) || next.is_none() || before_interpolation;
        let backslashes = if special && run > 0 { run * 2 } else { run };
        out.extend(std::iter::repeat_n('\\', backslashes));
        match next {
            Some(c) if c == quote => {
                out.push('\\');
                out.push(c);
                i += 1;
            }
            Some('$') if before_interpolation => {
                out.push_str("\\$");
                i += 1;
            }
            Some(c) => {
                out.push(c);
                i += 1;
            }
            None => {}
        }
    }
    out
}

/// `+`, `++` or `~`, then dotted parts as Hydra's lexer takes them (`KEY_SPECIAL`: a letter,
/// `_` or `$`, then letters, digits, `_`, `-`, `$`; or digits, a list index), and an optional
/// `@package` of the same parts. AReaL's second shell would expand a `$`: not there.
fn hydra_key_ok(key: &str, rejoined: bool) -> bool {
    let body = key
        .strip_prefix("++")
        .or_else(|| key.strip_prefix('+'))
        .or_else(|| key.strip_prefix('~'))
        .unwrap_or(key);
    let part_ok = |part: &str| {
        let mut bytes = part.bytes();
        match bytes.next() {
            None => false,
            Some(b) if b.is_ascii_digit() => part.bytes().all(|b| b.is_ascii_digit()),
            Some(b) if b.is_ascii_alphabetic() || b == b'_' || b == b'$' => {
                bytes.all(|b| b.is_ascii_alphanumeric() || b"_-$".contains(&b))
            }
            Some(_) => false,
        }
    };
    let path_ok = |path: &str| path.split('.').all(part_ok);
    let (path, package) = match body.split_once('@') {
        Some((p, pkg)) => (p, Some(pkg)),
        None => (body, None),
    };
    path_ok(path)
        && package.is_none_or(|p| p.is_empty() || path_ok(p))
        && !(rejoined && key.contains('$'))
}

fn hydra_dict_key_ok(key: &str) -> bool {
    !key.is_empty()
        && key.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-".contains(&b))
}

/// Quote for a POSIX shell: a word of safe bytes as it is (so the script stays readable),
/// anything else in single quotes with `'\''` for a quote.
fn shell_quote(s: &str) -> String {
    let safe = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-/.+@%:=,".contains(&b));
    if safe {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// Escape for the inside of shell double quotes.
fn double_quote_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '\\' | '"' | '$' | '`') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hydra(key: &str, value: Value) -> String {
        argument(OverrideSyntax::Hydra, key, &value).unwrap()
    }

    #[test]
    fn plain_words_stay_readable() {
        assert_eq!(
            hydra(
                "actor_rollout_ref.model.path",
                "Qwen/Qwen2.5-7B-Instruct".into()
            ),
            "actor_rollout_ref.model.path=Qwen/Qwen2.5-7B-Instruct"
        );
        assert_eq!(
            hydra("data.train_batch_size", 1024.into()),
            "data.train_batch_size=1024"
        );
        assert_eq!(hydra("a.b", true.into()), "a.b=true");
        assert_eq!(hydra("a.b", Value::Null), "a.b=null");
        assert_eq!(hydra("a.lr", 1e-6.into()), "a.lr=1e-6");
    }

    #[test]
    fn a_home_path_expands_on_the_node() {
        assert_eq!(
            hydra("data.train_files", "~/data/diamonds/train.parquet".into()),
            "\"data.train_files='$HOME/data/diamonds/train.parquet'\""
        );
        assert_eq!(hydra("d", "~".into()), "\"d='$HOME'\"");
        let err = argument(OverrideSyntax::Hydra, "d", &"~bob/x".into()).unwrap_err();
        assert!(err.to_string().contains("another user's home"), "{err}");
    }

    #[test]
    fn reserved_characters_are_quoted_for_hydra_then_the_shell() {
        assert_eq!(hydra("n", "a b".into()), "'n=\"a b\"'");
        assert_eq!(hydra("n", "a,b".into()), "'n=\"a,b\"'");
        assert_eq!(hydra("n", "x${y}".into()), "'n=\"x\\${y}\"'");
        assert_eq!(hydra("n", "0".into()), "'n=\"0\"'");
        assert_eq!(hydra("n", "True".into()), "'n=\"True\"'");
        assert_eq!(
            hydra("n", "say \"hi\"\\".into()),
            "'n=\"say \\\"hi\\\"\\\\\"'"
        );
    }

    #[test]
    fn infinities_and_nan_are_hydra_floats() {
        for (yaml, want) in [(".inf", "k=inf"), ("-.inf", "k=-inf"), (".nan", "k=nan")] {
            let v: Value = serde_yaml::from_str(yaml).unwrap();
            assert_eq!(hydra("k", v), want);
        }
    }

    #[test]
    fn lists_and_maps_are_hydra_containers() {
        let list: Value = serde_yaml::from_str("[console, wandb]").unwrap();
        assert_eq!(
            hydra("trainer.logger", list),
            "'trainer.logger=[console,wandb]'"
        );
        let map: Value = serde_yaml::from_str("{hidden_size: 896, act: silu}").unwrap();
        assert_eq!(hydra("m", map), "'m={hidden_size:896,act:silu}'");
    }

    #[test]
    fn escapes_round_trip_backslashes_quotes_and_interpolations() {
        assert_eq!(hydra_escape(r"a\b", '"'), r"a\b");
        assert_eq!(hydra_escape(r"end\", '"'), r"end\\");
        assert_eq!(hydra_escape(r#"q\""#, '"'), r#"q\\\""#);
        assert_eq!(hydra_escape(r"\${x}", '"'), r"\\\${x}");
        assert_eq!(hydra_escape("it's", '\''), r"it\'s");
    }

    #[test]
    fn bad_keys_are_refused() {
        for key in ["a b", "a=b", "", "a..b", "+", "a.-b", "a@p!q", "1a.b"] {
            assert!(
                argument(OverrideSyntax::Hydra, key, &1.into()).is_err(),
                "{key}"
            );
        }
        for key in [
            "+a.b",
            "++a.b",
            "~a",
            "a.b-c",
            "a.$b",
            "a@pkg",
            "models.0.path",
            "a@_global_",
        ] {
            assert!(
                argument(OverrideSyntax::Hydra, key, &1.into()).is_ok(),
                "{key}"
            );
        }
    }

    #[test]
    fn what_a_second_shell_would_change_is_refused_for_areal() {
        let rejoined = |v: Value| argument(OverrideSyntax::HydraRejoined, "k", &v);
        assert_eq!(
            rejoined("sglang:d1p1t1+fsdp:d1p1t1".into()).unwrap(),
            "k=sglang:d1p1t1+fsdp:d1p1t1"
        );
        assert_eq!(
            rejoined("~/models/q".into()).unwrap(),
            "k=\"$HOME\"/models/q"
        );
        assert!(argument(OverrideSyntax::HydraRejoined, "a.$b", &1.into()).is_err());
        for bad in ["a b", "x$(reboot)", "a,b", "it's"] {
            let err = rejoined(bad.into()).unwrap_err();
            assert!(err.message.contains("through a shell"), "{bad}: {err}");
        }
    }

    #[test]
    fn plain_syntax_is_the_old_shell_quoted_pair() {
        assert_eq!(
            argument(OverrideSyntax::Plain, "k", &"x$(y)".into()).unwrap(),
            "'k=x$(y)'"
        );
    }
}
