//! The decorations launchers and loggers put in front of what a program reports, as data:
//! `data/decorations.tsv`, one row per decoration with the launcher it comes from, how it is
//! recognised and an example. The normaliser (`normalise::strip_prefixes`) peels them
//! off a line, repeatedly and in any order, before any rule looks at the line: a rule then
//! matches the same body behind `gpu-q-13: ` (pdsh), `[1,0]<stderr>:` (mpirun) or
//! `[pod/x/c] ` (kubectl) as on a bare line.
//!
//! A row's `pattern` is either `builtin` (recognised by code in `normalise.rs`, for the
//! decorations on nearly every line of a training log, where a regex would cost more), or a
//! regex matched at the current position. In a regex, a group named `body` marks where the
//! body starts (otherwise it starts where the match ends), and a group named `level` holds a
//! level word or glog letter (`error`, `W`, ...). Each row's example is tested in both
//! directions (`tests/vocabulary.rs`): a failure behind it still classifies, a config line
//! behind it is still a mention.

use std::sync::OnceLock;

use regex::bytes::Regex;

use super::normalise::Level;

/// The table as shipped.
pub const TABLE: &str = include_str!("../data/decorations.tsv");

/// One row of the table.
#[derive(Debug, Clone)]
pub struct Decoration {
    pub name: String,
    pub launcher: String,
    /// `builtin`, or the regex.
    pub pattern: String,
    /// `-`, `error`, or `level` (the level the decoration carries).
    pub level: String,
    /// A decoration as printed; `…` stands for the body when the decoration wraps it.
    pub example: String,
}

impl Decoration {
    pub fn is_builtin(&self) -> bool {
        self.pattern == "builtin"
    }
}

/// The rows of [`TABLE`]; a malformed row names its line.
pub fn rows() -> Result<Vec<Decoration>, String> {
    let mut lines = TABLE.lines();
    if lines.next() != Some("name\tlauncher\tpattern\tlevel\texample") {
        return Err("decorations.tsv: bad header".to_string());
    }
    lines
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            let c: Vec<&str> = l.split('\t').collect();
            if c.len() != 5 {
                return Err(format!(
                    "decorations.tsv line {}: {} columns, want 5",
                    i + 2,
                    c.len()
                ));
            }
            Ok(Decoration {
                name: c[0].to_string(),
                launcher: c[1].to_string(),
                pattern: c[2].to_string(),
                level: c[3].to_string(),
                example: c[4].replace("\\x1b", "\x1b"),
            })
        })
        .collect()
}

/// The regex rows, compiled once.
pub(crate) struct Peeler {
    /// Every regex row as one alternation anchored at the start (groups unnamed): one attempt
    /// per position tells whether any row matches.
    any: Regex,
    /// Each regex row alone (anchored, with its named groups) and its name.
    each: Vec<(Regex, &'static str)>,
}

pub(crate) fn peeler() -> &'static Peeler {
    static P: OnceLock<Peeler> = OnceLock::new();
    P.get_or_init(|| {
        let rows = rows().unwrap_or_else(|e| panic!("{e}"));
        let regex_rows: Vec<Decoration> = rows.into_iter().filter(|r| !r.is_builtin()).collect();
        let unnamed = |p: &str| p.replace("(?P<body>", "(?:").replace("(?P<level>", "(?:");
        let any = regex_rows
            .iter()
            .map(|r| format!("(?:{})", unnamed(&r.pattern)))
            .collect::<Vec<_>>()
            .join("|");
        let any = Regex::new(&format!("^(?:{any})")).expect("decorations: combined regex");
        let each = regex_rows
            .into_iter()
            .map(|r| {
                let re = Regex::new(&format!("^(?:{})", r.pattern))
                    .unwrap_or_else(|e| panic!("decorations.tsv {}: {e}", r.name));
                (re, &*String::leak(r.name))
            })
            .collect();
        Peeler { any, each }
    })
}

impl Peeler {
    /// A regex decoration starting at `i`: where the body starts, the level it carries, and
    /// its name. Never an empty match.
    pub(crate) fn peel(&self, seg: &[u8], i: usize) -> Option<(usize, Level, &'static str)> {
        let rest = seg.get(i..)?;
        if !self.any.is_match(rest) {
            return None;
        }
        self.each.iter().find_map(|(re, name)| {
            let c = re.captures(rest)?;
            let end = c.name("body").map_or_else(|| c[0].len(), |b| b.start());
            let level = c
                .name("level")
                .map_or(Level::Unknown, |l| level_of(l.as_bytes()));
            (end > 0).then_some((i + end, level, *name))
        })
    }
}

/// A level word (any case) or glog letter.
pub(crate) fn level_of(w: &[u8]) -> Level {
    let w = w.to_ascii_lowercase();
    match w.as_slice() {
        b"error" | b"err" | b"critical" | b"crit" | b"fatal" | b"e" | b"f" | b"c" => Level::Error,
        b"warning" | b"warn" | b"info" | b"debug" | b"trace" | b"notice" | b"w" | b"i" | b"d" => {
            Level::Quiet
        }
        _ => Level::Unknown,
    }
}
