//! A trainer's configuration as flat dotted keys: what the trainer itself would read from its
//! command line (Hydra `key=value` overrides) and its YAML config files, with typed getters.
//!
//! Both sides of orch build one: the simulated trainer from the arguments a rendered script
//! passes it, and the planner from an attempt's overrides; the estimator reads either the
//! same way, so the simulator and the planner can never disagree about a configuration.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};

/// A flat `dotted.key -> raw value` map with typed getters.
///
/// Values are kept as the text the trainer would parse (quotes removed); `${other.key}`
/// interpolations are resolved on read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Overrides {
    map: BTreeMap<String, String>,
    /// Hydra overrides in command-line order, as given (for Hydra's failure banner).
    pub given: Vec<String>,
}

/// Python/YAML/Hydra truthiness: `True`, `true`, `1`, `yes`, `on` (and the opposites).
pub fn parse_bool(s: &str) -> Option<bool> {
    match s.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" | "y" => Some(true),
        "false" | "0" | "no" | "off" | "n" => Some(false),
        _ => None,
    }
}

/// `null`, `None`, `~` and the empty string mean "not set".
fn is_null(s: &str) -> bool {
    matches!(
        s.trim(),
        "" | "null" | "None" | "none" | "~" | "Null" | "NULL"
    )
}

/// Strip one level of matching single or double quotes.
pub fn unquote(s: &str) -> &str {
    let t = s.trim();
    if t.len() >= 2
        && ((t.starts_with('\'') && t.ends_with('\'')) || (t.starts_with('"') && t.ends_with('"')))
    {
        &t[1..t.len() - 1]
    } else {
        t
    }
}

impl Overrides {
    /// No keys.
    pub fn new() -> Self {
        Self::default()
    }

    /// Apply Hydra-style overrides: `key=value`, `+key=value` (add), `++key=value` (force add),
    /// `~key` / `~key=value` (delete). Arguments that are not overrides (flags, script paths)
    /// are returned for the caller.
    pub fn apply_hydra(&mut self, args: &[String]) -> Vec<String> {
        let mut rest = Vec::new();
        for arg in args {
            let a = arg.trim();
            if let Some(del) = a.strip_prefix('~') {
                let key = del.split('=').next().unwrap_or(del);
                self.map.remove(key.trim());
                self.given.push(a.to_string());
                continue;
            }
            if a.starts_with('-') {
                rest.push(arg.clone());
                continue;
            }
            match a.split_once('=') {
                Some((k, v)) if !k.is_empty() && !k.contains(' ') => {
                    let key = k.trim_start_matches('+').trim();
                    self.map.insert(key.to_string(), unquote(v).to_string());
                    self.given.push(a.to_string());
                }
                _ => rest.push(arg.clone()),
            }
        }
        rest
    }

    /// Set one key (raw value).
    pub fn set(&mut self, key: &str, value: &str) {
        self.map.insert(key.to_string(), value.to_string());
    }

    /// Merge a YAML document, flattened to dotted keys. Existing keys are overwritten.
    pub fn merge_yaml(&mut self, doc: &serde_yaml::Value) {
        flatten("", doc, &mut self.map);
    }

    /// Load and merge a YAML file (a regular file within [`crate::input`]'s limits).
    pub fn merge_yaml_file(&mut self, path: &Path) -> Result<()> {
        let text = crate::input::read_config_text(path).map_err(|e| match e.kind {
            // As the trainers' own readers word it (their outputs are golden files).
            crate::input::InputErrorKind::Io(io) => {
                anyhow::Error::new(io).context(format!("reading {}", path.display()))
            }
            _ => e.into(),
        })?;
        let doc = crate::input::parse_value(&text)
            .with_context(|| format!("parsing {}", path.display()))?;
        self.merge_yaml(&doc);
        Ok(())
    }

    /// Raw value of a key, interpolations resolved; `None` when absent or null.
    pub fn get(&self, key: &str) -> Option<String> {
        let raw = self.map.get(key)?;
        let v = self.interpolate(raw, 0);
        (!is_null(&v)).then_some(v)
    }

    /// Like [`get`](Self::get), but also accepts a unique key ending in `.key`
    /// (e.g. `training.micro_batch_size` for `micro_batch_size`).
    pub fn get_suffix(&self, key: &str) -> Option<String> {
        if let Some(v) = self.get(key) {
            return Some(v);
        }
        let suffix = format!(".{key}");
        let mut hits = self.map.keys().filter(|k| k.ends_with(&suffix));
        let first = hits.next()?;
        if hits.next().is_some() {
            return None;
        }
        self.get(first)
    }

    /// `key` is set.
    pub fn contains(&self, key: &str) -> bool {
        self.map.contains_key(key)
    }

    /// `key`'s value, else `default` (interpolated).
    pub fn str_or(&self, key: &str, default: &str) -> String {
        self.get(key)
            .unwrap_or_else(|| self.interpolate(default, 0))
    }

    /// `key` as a Python/YAML boolean, else `default`.
    pub fn bool_or(&self, key: &str, default: bool) -> bool {
        self.get(key)
            .and_then(|v| parse_bool(&v))
            .unwrap_or(default)
    }

    /// `key` as a number, else `default`.
    pub fn f64_or(&self, key: &str, default: f64) -> f64 {
        self.f64_opt(key).unwrap_or(default)
    }

    /// `key` as a number, if set and numeric.
    pub fn f64_opt(&self, key: &str) -> Option<f64> {
        self.get(key).and_then(|v| v.trim().parse::<f64>().ok())
    }

    /// `key` as a count, else `default`.
    pub fn u64_or(&self, key: &str, default: u64) -> u64 {
        self.u64_opt(key).unwrap_or(default)
    }

    /// Integer value; accepts `1024`, `1024.0`, `1e3`, `1_024`.
    pub fn u64_opt(&self, key: &str) -> Option<u64> {
        self.get(key).and_then(|v| parse_u64(&v))
    }

    /// Resolve `${a.b}` and `${oc.select:a.b,default}` references (Hydra / OmegaConf).
    fn interpolate(&self, raw: &str, depth: usize) -> String {
        if depth > 8 || !raw.contains("${") {
            return raw.to_string();
        }
        let mut out = String::new();
        let mut rest = raw;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            let Some(end) = matching_brace(after) else {
                out.push_str(&rest[start..]);
                return out;
            };
            let inner = &after[..end];
            let (key, default) = match inner.strip_prefix("oc.select:") {
                Some(sel) => match sel.split_once(',') {
                    Some((k, d)) => (k.trim(), Some(d.trim())),
                    None => (sel.trim(), None),
                },
                None => (inner.trim(), None),
            };
            let value = match self.map.get(key) {
                Some(v) => self.interpolate(v, depth + 1),
                None => default.map(|d| unquote(d).to_string()).unwrap_or_default(),
            };
            out.push_str(&value);
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        out
    }
}

fn matching_brace(s: &str) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => return Some(i),
            '}' => depth -= 1,
            _ => {}
        }
    }
    None
}

/// Integer from text as Python/YAML would write it.
pub fn parse_u64(v: &str) -> Option<u64> {
    let t = v.trim().replace('_', "");
    if let Ok(n) = t.parse::<u64>() {
        return Some(n);
    }
    let f: f64 = t.parse().ok()?;
    (f.is_finite() && f >= 0.0 && f.fract() == 0.0).then_some(f as u64)
}

fn flatten(prefix: &str, v: &serde_yaml::Value, out: &mut BTreeMap<String, String>) {
    use serde_yaml::Value;
    match v {
        Value::Mapping(m) => {
            for (k, val) in m {
                let k = match k {
                    Value::String(s) => s.clone(),
                    Value::Number(n) => n.to_string(),
                    Value::Bool(b) => b.to_string(),
                    _ => continue,
                };
                let key = if prefix.is_empty() {
                    k
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, val, out);
            }
        }
        Value::Null => {
            out.insert(prefix.to_string(), "null".into());
        }
        Value::Bool(b) => {
            out.insert(prefix.to_string(), b.to_string());
        }
        Value::Number(n) => {
            out.insert(prefix.to_string(), n.to_string());
        }
        Value::String(s) => {
            out.insert(prefix.to_string(), s.clone());
        }
        other => {
            let text = serde_json::to_string(other).unwrap_or_default();
            out.insert(prefix.to_string(), text);
        }
    }
}
