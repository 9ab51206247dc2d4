//! The template language: the one minijinja [`environment`] every template file and every
//! template rule is evaluated in.
//!
//! Undefined values are errors (strict undefined), so a misspelt variable fails the render
//! instead of becoming an empty string. Filters keep values from escaping their place in a
//! script: `shq` quotes any value for a POSIX shell, so `x$(touch /tmp/p)` reaches the trainer
//! as that literal string; `directive` refuses values that could end or extend an `#SBATCH`
//! line. (Rendering adds `comment` and the formatter every `{{ … }}` goes through:
//! `render::script`.) This module depends on nothing else of orch, so both the plan (which checks rules)
//! and the renderer (which renders files) can use it without depending on each other.
//! `home_path` writes a path for the shell with a leading `~` left for the job's own shell to
//! expand (`"$HOME"/rest`): `~` means the home directory on the node, not on the login node.

use minijinja::{Environment, ErrorKind, UndefinedBehavior, Value};
use serde::Serialize;

/// The environment every template and rule is evaluated in.
pub fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.set_syntax(
        minijinja::syntax::SyntaxConfig::builder()
            // minijinja drops a template's final newline by default; scripts should end in one.
            .keep_trailing_newline(true)
            .build()
            .expect("default delimiters are valid"),
    );
    env.add_filter("shq", shq);
    env.add_filter("directive", directive);
    env.add_filter("home_path", home_path);
    env
}

/// A path as a shell word: `~` or `~/rest` as `"$HOME"` followed by the quoted rest, expanded
/// by the shell that runs the script (on the node); any other path quoted as by [`shq`].
pub fn home_path(value: Value) -> Result<String, minijinja::Error> {
    let text = text_of(&value)?;
    match text.strip_prefix('~') {
        Some("") => Ok("\"$HOME\"".into()),
        Some(rest) if rest.starts_with('/') => Ok(format!("\"$HOME\"{}", shq(Value::from(rest))?)),
        _ => shq(value),
    }
}

/// Quote a value for a POSIX shell (safe values are left as they are).
pub fn shq(value: Value) -> Result<String, minijinja::Error> {
    let text = text_of(&value)?;
    shlex::try_quote(&text)
        .map(|q| q.into_owned())
        .map_err(|e| {
            minijinja::Error::new(
                ErrorKind::InvalidOperation,
                format!("cannot quote {text:?}: {e}"),
            )
        })
}

/// Allow only characters that cannot end or extend an `#SBATCH` directive.
pub fn directive(value: Value) -> Result<String, minijinja::Error> {
    let text = text_of(&value)?;
    let ok = !text.is_empty()
        && text
            .bytes()
            // sbatch splits a directive at whitespace and quotes, and bash reads the line as a
            // comment: these cannot end or extend it (`&|!*()` for --constraint expressions).
            .all(|b| b.is_ascii_alphanumeric() || b"._:,=/@%+-[]&|!*()".contains(&b));
    if ok {
        Ok(text)
    } else {
        Err(minijinja::Error::new(
            ErrorKind::InvalidOperation,
            format!(
                "{text:?} cannot go on an #SBATCH line (letters, digits and ._:,=/@%+-[]&|!*() only)"
            ),
        ))
    }
}

/// Any serializable value as a template value.
pub fn to_value<T: Serialize>(value: T) -> Value {
    Value::from(minijinja::value::Serde(value))
}

/// A filter's input as text; an undefined value is an error here too, never an empty string
/// that would quote or pass as `''`.
fn text_of(value: &Value) -> Result<String, minijinja::Error> {
    if value.is_undefined() {
        return Err(minijinja::Error::new(
            ErrorKind::UndefinedError,
            "undefined value",
        ));
    }
    Ok(match value.as_str() {
        Some(s) => s.to_string(),
        None => value.to_string(),
    })
}
