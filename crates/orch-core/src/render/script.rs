//! The one writer of values into rendered files: every `{{ … }}` of a template goes through
//! [`write`], the rendering environment's formatter.
//!
//! # Theory of operation
//! A rendered file is a script a shell runs (or a file a trainer reads), and a value from a
//! profile, an experiment, `--set` or the runs directory's path may hold anything: a newline ends
//! a comment and what follows runs (before the `#SBATCH` lines, sbatch then ignores them all);
//! `$(…)`, backquotes or `;` run in a shell word. So a value reaches the file in one of three ways
//! only:
//!
//! - through a filter that says where it goes, whose output is marked as orch's ([`Written`]):
//!   `shq` (a shell word),
//!   `home_path` (a path as a shell word, `~` left to the node's shell), `directive` (an
//!   `#SBATCH` option), `comment` (text in a comment: made one line, control characters written
//!   as escapes);
//! - prepared by the [context](super::context) as what it already is, marked there: an
//!   override's `arg` (written in the trainer's grammar and quoted), the `setup:` lines (shell
//!   as the user wrote it, one line each), `config_yaml` (a YAML document);
//! - as it is, where it can do no harm in any place of a script (a comment, a shell word, inside
//!   either kind of quotes, a YAML line): a number, a boolean, none, or text of ASCII letters,
//!   digits and `_-.,/:@%+=` only (orch's names, plain paths).
//!
//! Anything else fails the render with the template file and line before anything is written
//! or submitted (minijinja's `escape`, whose HTML entities leave `$(…)` as it is, and `safe`,
//! which would write anything as it is, too). A template that forgets a filter fails on the first value with a space in it
//! (every profile's GPU model has one) instead of handing a value to the shell.

use std::sync::Arc;

use minijinja::value::{Object, ObjectRepr, ValueKind};
use minijinja::{Environment, Error, ErrorKind, Output, State, Value};

use crate::config::jinja;

/// Text orch itself made for a script (a filter's output, a value the context prepared): the
/// only kind of value the formatter writes as it is. minijinja's own "safe" mark is not trusted:
/// its `split`, `lines`, `reverse` and `last` keep it on pieces of a quoted word
/// (`{{ (v | shq | split("'"))[1] }}` would be the bare value), and `| safe` sets it on anything.
#[derive(Debug)]
pub(crate) struct Written(String);

impl Object for Written {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Plain
    }

    fn render(self: &Arc<Self>, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// `text` as a value the formatter writes as it is (see [`Written`]).
pub(crate) fn written(text: String) -> Value {
    Value::from_object(Written(text))
}

/// Make `env` write values only as this module allows: the formatter, and the script filters
/// marking their output as orch's own.
pub(super) fn install(env: &mut Environment<'static>) {
    env.set_formatter(write);
    env.add_filter("shq", |v: Value| jinja::shq(v).map(written));
    env.add_filter("home_path", |v: Value| jinja::home_path(v).map(written));
    env.add_filter("directive", |v: Value| jinja::directive(v).map(written));
    env.add_filter("comment", comment);
    // minijinja's `escape` writes HTML entities and marks the result safe: in a script that
    // would pass `$(…)` through as written. Its `safe` marks any value safe as it is: a
    // template would hand data to the shell.
    for (name, why) in [
        (
            "escape",
            "HTML escaping does not make a value safe in a script",
        ),
        ("e", "HTML escaping does not make a value safe in a script"),
        (
            "safe",
            "`| safe` would write a value into a script as it is, where it could run",
        ),
    ] {
        env.add_filter(name, move |_: Value| -> Result<Value, Error> {
            Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("{why}: write `| shq` in a shell word, `| comment` in a comment"),
            ))
        });
    }
}

/// The formatter: orch's own text (a filter's output, a value the context prepared: [`Written`])
/// as it is; any other value only where it is inert everywhere, else an error.
pub(super) fn write(out: &mut Output, _state: &mut State, value: &Value) -> Result<(), Error> {
    let inert = value.downcast_object_ref::<Written>().is_some()
        || matches!(
            value.kind(),
            ValueKind::Number | ValueKind::Bool | ValueKind::None
        )
        || (value.kind() == ValueKind::String && value.as_str().is_some_and(is_inert));
    if !inert {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!(
                "{:?} cannot be written into a script as it is (only letters, digits and `_-.,/:@%+=` can): write it with `| shq` in a shell word, `| comment` in a comment",
                value.to_string()
            ),
        ));
    }
    write!(out, "{value}").map_err(Error::from)
}

/// Text that means the same in a comment, a shell word, inside single or double quotes and on
/// a YAML line: nothing a shell expands, splits, quotes or ends a line at.
pub fn is_inert(text: &str) -> bool {
    text.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"_-.,/:@%+=".contains(&b))
}

/// A value as text in a comment: one line, with each control character (newline, carriage
/// return, escape, …), Unicode line or paragraph separator and bidirectional override written
/// as an escape (`\n`, `\u{1b}`), so the comment ends where the template ends it and reads as
/// the value did.
pub fn comment(value: Value) -> Result<Value, Error> {
    if value.is_undefined() {
        return Err(Error::new(ErrorKind::UndefinedError, "undefined value"));
    }
    let text = match value.as_str() {
        Some(s) => s.to_string(),
        None => value.to_string(),
    };
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if breaks_a_comment(c) => out.extend(c.escape_unicode()),
            c => out.push(c),
        }
    }
    Ok(written(out))
}

/// Characters that end a line (for a shell, YAML 1.1 or an editor), or make a line show other
/// text than it holds.
fn breaks_a_comment(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{2028}' | '\u{2029}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(template: &str, ctx: Value) -> Result<String, Error> {
        let mut env = jinja::environment();
        install(&mut env);
        env.render_str(template, ctx)
    }

    #[test]
    fn a_comment_stays_one_line() {
        let ctx = minijinja::context! { v => "RTX\ntouch /tmp/x\r\u{1b}[2J\u{2028}y\u{202e}z" };
        assert_eq!(
            render("# {{ v | comment }}\n", ctx).unwrap(),
            "# RTX\\ntouch /tmp/x\\r\\u{1b}[2J\\u{2028}y\\u{202e}z\n"
        );
    }

    #[test]
    fn a_value_without_a_filter_is_refused_unless_inert() {
        for bad in [
            "a b",
            "a\nb",
            "$(touch x)",
            "`x`",
            "a;b",
            "'",
            "\"",
            "~",
            "#",
            "{a,b}",
            "é",
        ] {
            let err = render("x={{ v }}", minijinja::context! { v => bad }).unwrap_err();
            assert!(err.to_string().contains("| shq"), "{bad:?}: {err:#}");
        }
        for ok in [
            "diamonds-seed0",
            "/runs/RUN/attempts/1",
            "a=b,c:d@e%f+g",
            "",
        ] {
            assert_eq!(
                render("{{ v }}", minijinja::context! { v => ok }).unwrap(),
                ok
            );
        }
        assert_eq!(
            render(
                "{{ n }} {{ f }} {{ b }}",
                minijinja::context! { n => 4, f => 0.5, b => true }
            )
            .unwrap(),
            "4 0.5 True"
        );
    }

    #[test]
    fn filtered_values_are_written_as_the_filter_made_them() {
        let ctx = minijinja::context! { v => "a b$(x)" , p => "~/d ir", d => "gpu" };
        assert_eq!(
            render(
                "{{ v | shq }} {{ p | home_path }} {{ d | directive }} {{ v | comment }}",
                ctx
            )
            .unwrap(),
            "'a b$(x)' \"$HOME\"'/d ir' gpu a b$(x)"
        );
    }

    #[test]
    fn html_escaping_and_marking_safe_are_refused() {
        for template in ["{{ v | e }}", "{{ v | escape }}", "{{ v | safe }}"] {
            let err = render(template, minijinja::context! { v => "$(x)" }).unwrap_err();
            assert!(err.to_string().contains("| shq"), "{template}: {err:#}");
        }
    }

    /// minijinja's filters that keep its "safe" mark on pieces of a safe string do not make
    /// orch's marked text: a quoted word split open is refused, not written bare.
    #[test]
    fn pieces_of_a_quoted_word_are_not_written_bare() {
        let ctx = minijinja::context! { v => "$(touch /tmp/pwn)" };
        for template in [
            r#"{{ (v | shq | split("'"))[1] }}"#,
            r#"{{ v | shq | split("'") | last }}"#,
            r#"{{ v | shq | replace("'", "") }}"#,
            r#"{{ v | shq | reverse | reverse }}"#,
        ] {
            // Refused, by the formatter or by a string filter that orch's text is not.
            let out = render(template, ctx.clone());
            assert!(out.is_err(), "{template}: {out:?}");
        }
    }

    #[test]
    fn a_sequence_without_a_filter_is_refused() {
        let err = render("{{ v }}", minijinja::context! { v => vec!["a", "b"] }).unwrap_err();
        assert!(err.to_string().contains("cannot be written"), "{err:#}");
    }
}
