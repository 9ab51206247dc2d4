//! Limits on the configuration orch reads, each refused with its name and value in the
//! message, so that no input costs more than time linear in its size: a file past
//! [`MAX_CONFIG_BYTES`] is not read, YAML nested past [`MAX_YAML_DEPTH`] is not parsed (the
//! depth is measured in one pass before the parser, whose cost grows faster than the depth),
//! and a sweep past [`MAX_SWEEP_VALUES`] is not expanded.

use crate::error::ConfigError;

/// The largest configuration file (experiment, profile, ladder, template, plan) orch reads:
/// the built-in ones are a few KiB.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// How deeply a YAML document may nest mappings and sequences: the built-in files nest
/// four levels.
pub const MAX_YAML_DEPTH: usize = 64;

/// The most values one sweep may have: each member is a run with its own directory.
pub const MAX_SWEEP_VALUES: usize = 10_000;

/// Refuse `text` (from `origin`) when it is larger than [`MAX_CONFIG_BYTES`] or nests deeper
/// than [`MAX_YAML_DEPTH`].
pub fn check_yaml(origin: &str, text: &str) -> Result<(), ConfigError> {
    check_size(origin, text.len() as u64)?;
    if let Some(line) = too_deep(text, MAX_YAML_DEPTH) {
        return Err(ConfigError::Parse {
            origin: origin.to_string(),
            location: Some((line, 1)),
            message: format!(
                "nested more than {MAX_YAML_DEPTH} levels deep (the limit for orch's YAML files, MAX_YAML_DEPTH); flatten the document"
            ),
        });
    }
    Ok(())
}

/// Refuse a file of `len` bytes larger than [`MAX_CONFIG_BYTES`], before reading it.
pub fn check_size(origin: &str, len: u64) -> Result<(), ConfigError> {
    if len > MAX_CONFIG_BYTES {
        return Err(ConfigError::Other {
            origin: origin.to_string(),
            message: format!(
                "{len} bytes, more than the {MAX_CONFIG_BYTES} bytes (1 MiB) a configuration file may have (MAX_CONFIG_BYTES)"
            ),
        });
    }
    Ok(())
}

/// The first line (1-based) where `text` nests deeper than `limit`, if it does. Counts, in one
/// pass, flow collections (`[`, `{`) open outside quotes and comments, plus the block levels
/// around the line: its indentation against the enclosing lines' and the `- ` entries it
/// opens. It may count a bracket inside a plain scalar, so it overestimates rather than misses:
/// real configuration nests a handful of levels, far below any limit.
pub fn too_deep(text: &str, limit: usize) -> Option<usize> {
    let mut flow = 0usize;
    let mut indents: Vec<usize> = Vec::new();
    let mut quote: Option<char> = None;
    for (i, line) in text.lines().enumerate() {
        let mut block = 0;
        if flow == 0 && quote.is_none() {
            let body = line.trim_start_matches(' ');
            if body.is_empty() || body.starts_with('#') {
                continue;
            }
            let indent = line.len() - body.len();
            while indents.last().is_some_and(|&top| top >= indent) {
                indents.pop();
            }
            indents.push(indent);
            let dashes = body
                .split(' ')
                .take_while(|t| *t == "-" || t.is_empty())
                .filter(|t| *t == "-")
                .count();
            block = indents.len() + dashes;
        }
        let mut previous = ' ';
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            match (quote, c) {
                (Some('"'), '\\') => {
                    chars.next();
                }
                (Some(q), c) if c == q => {
                    if q == '\'' && chars.peek() == Some(&'\'') {
                        chars.next();
                    } else {
                        quote = None;
                    }
                }
                (Some(_), _) => {}
                (None, '"' | '\'') => quote = Some(c),
                (None, '#') if previous == ' ' || previous == '\t' => break,
                (None, '[' | '{') => {
                    flow += 1;
                    if block + flow > limit {
                        return Some(i + 1);
                    }
                }
                (None, ']' | '}') => flow = flow.saturating_sub(1),
                _ => {}
            }
            previous = c;
        }
        if block + flow > limit {
            return Some(i + 1);
        }
        // A quote in block context ends with its line when it is an apostrophe in a plain
        // scalar (`don't`); only flow context carries quotes over lines as YAML does.
        if flow == 0 && quote == Some('\'') {
            quote = None;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_counts_flow_and_block_nesting_but_not_quoted_or_commented_brackets() {
        assert_eq!(too_deep("a: 1\nb:\n  c: 2\n", 2), None);
        assert_eq!(too_deep("a: 1\nb:\n  c:\n    d: 2\n", 2), Some(4));
        assert_eq!(too_deep("a: [[1]]\n", 3), None);
        assert_eq!(too_deep("a: [[[1]]]\n", 3), Some(1));
        assert_eq!(too_deep("a: '[[[[['\nb: \"{{{{\"\nc: 1 # [[[[[\n", 2), None);
        assert_eq!(too_deep("- - - - x\n", 3), Some(1));
        assert_eq!(too_deep("msg: don't [stop]\nb: [1]\n", 2), None);
        let deep = "[".repeat(200_000) + &"]".repeat(200_000);
        assert_eq!(too_deep(&deep, MAX_YAML_DEPTH), Some(1));
    }

    #[test]
    fn every_built_in_file_is_well_within_the_limits() {
        for dir in [
            super::super::BUILTIN_EXPERIMENTS.clone(),
            super::super::BUILTIN_PROFILES.clone(),
            super::super::BUILTIN_LADDERS.clone(),
        ] {
            for file in dir.files() {
                let text = file.contents_utf8().unwrap();
                assert_eq!(too_deep(text, 8), None, "{}", file.path().display());
            }
        }
    }
}
