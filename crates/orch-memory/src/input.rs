//! Bounded input: every file orch reads as configuration and every YAML document it parses
//! costs time and memory bounded by a named limit, whatever the file holds or is.
//!
//! # Theory of operation
//! [`read_bounded`] reads only a regular file: a FIFO blocks its reader until a writer comes,
//! and a device such as `/dev/zero` never ends, so the path is checked before it is opened and
//! the opened file again (it may have been swapped in between). It then reads at most one byte
//! past the limit, so a file that grows while it is read is refused too.
//!
//! [`check_yaml`] measures a YAML text before anything deserializes it: its nesting depth in
//! one pass over the text ([`too_deep`]; the parser's cost grows faster than the depth), then
//! its size with every alias written out. An alias (`*name`) repeats its anchor's whole value
//! each time it is named, so one 600 KB string named 28,599 times is a 1 MiB file that
//! deserializes to 16 GiB. The expanded size is counted by deserializing the document under a
//! budget ([`bounded_value`]: nodes, and the bytes of their scalars), which stops at the first
//! node past either limit; the parser replays an anchor's events for each alias without
//! copying them, so the count costs no more than the budget. The limits are far above what
//! any file within [`MAX_CONFIG_BYTES`] holds without aliases, so they refuse only expansion.

use std::cell::Cell;
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::de::{self, DeserializeSeed, EnumAccess, MapAccess, SeqAccess, VariantAccess, Visitor};
use serde_yaml::Value;
use serde_yaml::value::{Tag, TaggedValue};

/// The largest file orch reads as input (an experiment, profile, ladder, template file,
/// dataset, model `config.json`, plan or trainer configuration): the built-in ones are a few
/// KiB, a model's `config.json` a few more.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// How deeply a YAML document may nest mappings and sequences: the built-in files nest four
/// levels.
pub const MAX_YAML_DEPTH: usize = 64;

/// The most bytes of scalars a YAML text may hold with every alias written out (a string
/// counts its length, a number or a boolean 8): 16 times [`MAX_CONFIG_BYTES`], room for
/// anchors that share blocks, not for an alias that multiplies a file.
pub const MAX_YAML_EXPANDED_BYTES: u64 = 16 << 20;

/// The most nodes (scalars, sequences, mappings) a YAML text may hold with every alias written
/// out: more than a file within [`MAX_CONFIG_BYTES`] holds without aliases (at most 3 nodes
/// per 2 bytes, `[?,?,…]`), few enough that their values take a few hundred MB at most.
pub const MAX_YAML_NODES: u64 = 1 << 21;

/// A file orch did not read, and why.
#[derive(Debug, thiserror::Error)]
#[error("{}: {kind}", path.display())]
pub struct InputError {
    pub path: PathBuf,
    pub kind: InputErrorKind,
}

/// Why a file was not read.
#[derive(Debug, thiserror::Error)]
pub enum InputErrorKind {
    /// The operating system's error opening or reading it.
    #[error("{0}")]
    Io(std::io::Error),
    /// A FIFO, a device, a socket or a directory.
    #[error(
        "not a regular file but a {0}; orch reads its input only from regular files (a FIFO blocks and a device such as /dev/zero never ends)"
    )]
    NotAFile(&'static str),
    /// Larger than the limit (`size` when the file said so before it was read).
    #[error(
        "{}more than the {limit} bytes ({}) orch reads from one input file ({name})",
        size.map(|s| format!("{s} bytes, ")).unwrap_or_default(),
        human(*limit)
    )]
    TooLarge {
        size: Option<u64>,
        limit: u64,
        name: &'static str,
    },
    /// Not UTF-8 text.
    #[error("not a text file: byte {0} is not UTF-8")]
    NotText(usize),
}

impl InputError {
    /// Whether the file is simply not there (nor its directory): a caller with a fallback uses it.
    pub fn is_missing(&self) -> bool {
        matches!(&self.kind, InputErrorKind::Io(e)
            if matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory))
    }
}

/// `bytes` as a person reads a limit: `1 MiB`, `16 MiB`, `512 KiB`.
fn human(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} bytes"),
    }
}

/// The bytes of the regular file at `path`, refused when it is anything else or larger than
/// `limit` (named `name` in the error).
pub fn read_bounded(path: &Path, limit: u64, name: &'static str) -> Result<Vec<u8>, InputError> {
    let refuse = |kind| InputError {
        path: path.to_path_buf(),
        kind,
    };
    let io = |e| refuse(InputErrorKind::Io(e));
    let too_large = |size| refuse(InputErrorKind::TooLarge { size, limit, name });
    let meta = std::fs::metadata(path).map_err(io)?;
    if let Some(what) = not_regular(&meta) {
        return Err(refuse(InputErrorKind::NotAFile(what)));
    }
    if meta.len() > limit {
        return Err(too_large(Some(meta.len())));
    }
    let file = std::fs::File::open(path).map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if let Some(what) = not_regular(&meta) {
        return Err(refuse(InputErrorKind::NotAFile(what)));
    }
    let mut bytes = Vec::with_capacity(meta.len().min(limit) as usize + 1);
    file.take(limit + 1).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() as u64 > limit {
        return Err(too_large(None));
    }
    Ok(bytes)
}

/// The text of the regular file at `path`, at most [`MAX_CONFIG_BYTES`] of UTF-8.
pub fn read_config_text(path: &Path) -> Result<String, InputError> {
    let bytes = read_bounded(path, MAX_CONFIG_BYTES, "MAX_CONFIG_BYTES")?;
    String::from_utf8(bytes).map_err(|e| InputError {
        path: path.to_path_buf(),
        kind: InputErrorKind::NotText(e.utf8_error().valid_up_to()),
    })
}

/// What a file that is not a regular one is, in words.
fn not_regular(meta: &std::fs::Metadata) -> Option<&'static str> {
    let t = meta.file_type();
    if t.is_file() {
        return None;
    }
    if t.is_dir() {
        return Some("directory");
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return Some("FIFO (named pipe)");
        }
        if t.is_char_device() {
            return Some("character device");
        }
        if t.is_block_device() {
            return Some("block device");
        }
        if t.is_socket() {
            return Some("socket");
        }
    }
    Some("special file")
}

/// A YAML text past one of the limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum YamlLimit {
    /// Nested past [`MAX_YAML_DEPTH`], first at this 1-based line.
    #[error(
        "nested more than {MAX_YAML_DEPTH} levels deep (the limit for orch's YAML files, MAX_YAML_DEPTH); flatten the document"
    )]
    Depth { line: usize },
    /// Its aliases expand it past [`MAX_YAML_NODES`].
    #[error(
        "its aliases expand it past {MAX_YAML_NODES} nodes (the limit for orch's YAML files with every alias written out, MAX_YAML_NODES): each `*alias` copies its anchor's whole value; name a large value fewer times"
    )]
    Nodes,
    /// Its aliases expand it past [`MAX_YAML_EXPANDED_BYTES`].
    #[error(
        "its aliases expand it past {MAX_YAML_EXPANDED_BYTES} bytes ({}, the limit for orch's YAML files with every alias written out, MAX_YAML_EXPANDED_BYTES): each `*alias` copies its anchor's whole value; name a large value fewer times",
        human(MAX_YAML_EXPANDED_BYTES)
    )]
    Bytes,
}

impl YamlLimit {
    /// The line the refusal points at, when it points at one.
    pub fn line(&self) -> Option<usize> {
        match self {
            YamlLimit::Depth { line } => Some(*line),
            YamlLimit::Nodes | YamlLimit::Bytes => None,
        }
    }
}

/// Refuse a YAML text (every document of it) that nests deeper than [`MAX_YAML_DEPTH`] or
/// whose aliases expand it past [`MAX_YAML_NODES`] or [`MAX_YAML_EXPANDED_BYTES`]. A text that
/// does not parse passes: the parse that follows names its error with its line.
pub fn check_yaml(text: &str) -> Result<(), YamlLimit> {
    if let Some(line) = too_deep(text, MAX_YAML_DEPTH) {
        return Err(YamlLimit::Depth { line });
    }
    let budget = Budget::default();
    for doc in serde_yaml::Deserializer::from_str(text) {
        if (&budget).deserialize(doc).is_err() {
            break;
        }
    }
    match budget.over.get() {
        Some(over) => Err(over),
        None => Ok(()),
    }
}

/// One YAML document as a [`Value`], refused as [`check_yaml`] refuses it: for values parsed
/// from text that no file limit bounds, such as `--set`'s.
pub fn parse_value(text: &str) -> Result<Value, ValueError> {
    check_yaml(text).map_err(ValueError::Limit)?;
    serde_yaml::from_str(text).map_err(ValueError::Parse)
}

/// Why [`parse_value`] returned no value.
#[derive(Debug, thiserror::Error)]
pub enum ValueError {
    /// Past a limit: refuse it, whatever else the text could mean.
    #[error("{0}")]
    Limit(YamlLimit),
    /// Not YAML.
    #[error("{0}")]
    Parse(serde_yaml::Error),
}

/// What a deserializer holds, as a [`Value`] built under the expansion limits: a type whose
/// text reaches it unchecked (a run's `plan.yaml`, read by the run machine) deserializes
/// through this, then from the value.
pub fn bounded_value<'de, D: de::Deserializer<'de>>(deserializer: D) -> Result<Value, D::Error> {
    let budget = Budget::default();
    (&budget).deserialize(deserializer)
}

/// Nodes and scalar bytes deserialized so far, and the first limit they passed.
#[derive(Default)]
struct Budget {
    nodes: Cell<u64>,
    bytes: Cell<u64>,
    over: Cell<Option<YamlLimit>>,
}

impl Budget {
    /// Count one node of `bytes` scalar bytes; past a limit, the error that stops the parse.
    fn take<E: de::Error>(&self, bytes: u64) -> Result<(), E> {
        let nodes = self.nodes.get() + 1;
        let total = self.bytes.get().saturating_add(bytes);
        self.nodes.set(nodes);
        self.bytes.set(total);
        let over = if nodes > MAX_YAML_NODES {
            YamlLimit::Nodes
        } else if total > MAX_YAML_EXPANDED_BYTES {
            YamlLimit::Bytes
        } else {
            return Ok(());
        };
        self.over.set(Some(over));
        Err(E::custom(over))
    }
}

/// The size a number or a boolean counts.
const WORD: u64 = 8;

impl<'de> DeserializeSeed<'de> for &Budget {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

/// Builds the [`Value`] as serde_yaml's own visitor does (a duplicate key keeps its last
/// value: the strict parse that follows refuses it), counting every node against the budget.
impl<'de> Visitor<'de> for &Budget {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_bool<E: de::Error>(self, b: bool) -> Result<Value, E> {
        self.take(WORD)?;
        Ok(Value::Bool(b))
    }

    fn visit_i64<E: de::Error>(self, i: i64) -> Result<Value, E> {
        self.take(WORD)?;
        Ok(Value::Number(i.into()))
    }

    fn visit_u64<E: de::Error>(self, u: u64) -> Result<Value, E> {
        self.take(WORD)?;
        Ok(Value::Number(u.into()))
    }

    fn visit_f64<E: de::Error>(self, f: f64) -> Result<Value, E> {
        self.take(WORD)?;
        Ok(Value::Number(f.into()))
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Value, E> {
        self.take(s.len() as u64)?;
        Ok(Value::String(s.to_owned()))
    }

    fn visit_string<E: de::Error>(self, s: String) -> Result<Value, E> {
        self.take(s.len() as u64)?;
        Ok(Value::String(s))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        self.take(0)?;
        Ok(Value::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        self.visit_unit()
    }

    fn visit_some<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        self.deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.take(0)?;
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(self)? {
            out.push(v);
        }
        Ok(Value::Sequence(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.take(0)?;
        let mut out = serde_yaml::Mapping::new();
        while let Some(k) = map.next_key_seed(self)? {
            let v = map.next_value_seed(self)?;
            out.insert(k, v);
        }
        Ok(Value::Mapping(out))
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<Value, A::Error> {
        // A tagged node (`!tag value`): the tag as a string, then its value.
        let (tag, contents) = data.variant::<String>()?;
        self.take(tag.len() as u64)?;
        let value = contents.newtype_variant_seed(self)?;
        Ok(Value::Tagged(Box::new(TaggedValue {
            tag: Tag::new(tag),
            value,
        })))
    }
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

    /// A 1 MiB document: one anchored string of `len` bytes named `n` times.
    fn fan_out(len: usize, n: usize) -> String {
        format!(
            "a: &big \"{}\"\nb: [{}]\n",
            "x".repeat(len),
            vec!["*big"; n].join(", ")
        )
    }

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
    fn an_anchor_named_past_the_byte_budget_is_refused_before_it_is_copied() {
        let text = fan_out(600_000, 700);
        assert!(text.len() < MAX_CONFIG_BYTES as usize);
        assert_eq!(check_yaml(&text), Err(YamlLimit::Bytes));
        assert!(matches!(
            parse_value(&text),
            Err(ValueError::Limit(YamlLimit::Bytes))
        ));
        // Within the budget, aliases are fine.
        assert_eq!(check_yaml(&fan_out(1000, 100)), Ok(()));
        let msg = YamlLimit::Bytes.to_string();
        assert!(
            msg.contains("MAX_YAML_EXPANDED_BYTES") && msg.contains("16 MiB"),
            "{msg}"
        );
    }

    #[test]
    fn small_nodes_named_past_the_node_budget_are_refused() {
        // 1,000 empty strings, named 3,000 times: 3 million nodes of no bytes.
        let text = format!(
            "a: &row [{}]\nb: [{}]\n",
            vec!["''"; 1000].join(","),
            vec!["*row"; 3000].join(",")
        );
        assert_eq!(check_yaml(&text), Err(YamlLimit::Nodes));
        // Nested aliases (each level ten times the one below): serde_yaml's own repetition
        // limit refuses these first, as a parse error.
        let mut laughs = String::from("l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..9 {
            let refs = vec![format!("*l{}", i - 1); 10].join(", ");
            laughs.push_str(&format!("l{i}: &l{i} [{refs}]\n"));
        }
        assert!(parse_value(&laughs).is_err());
    }

    #[test]
    fn a_tagged_value_and_every_scalar_build_the_value_serde_yaml_builds() {
        let text = "a: !Tag {x: 1}\nb: [true, -1, 2.5, ~, text]\nc: &c {d: e}\nf: *c\n";
        let want: Value = serde_yaml::from_str(text).unwrap();
        assert_eq!(parse_value(text).unwrap(), want);
        assert!(matches!(parse_value("a: [1"), Err(ValueError::Parse(_))));
        // A text that does not parse passes the check: its parse names the error.
        assert_eq!(check_yaml("a: [1"), Ok(()));
    }

    #[test]
    fn every_shipped_yaml_file_is_read_and_within_the_limits() {
        fn walk(dir: &Path, found: &mut Vec<PathBuf>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    walk(&path, found);
                } else if path.extension().is_some_and(|e| e == "yaml") {
                    found.push(path);
                }
            }
        }
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut files = Vec::new();
        for dir in [
            "experiments",
            "profiles",
            "datasets",
            "models",
            "ladders",
            "templates",
        ] {
            walk(&root.join(dir), &mut files);
        }
        assert!(files.len() > 30, "{files:?}");
        for path in files {
            let text = read_config_text(&path).unwrap();
            assert_eq!(check_yaml(&text), Ok(()), "{}", path.display());
        }
    }

    #[test]
    fn only_a_regular_file_within_the_limit_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let small = dir.path().join("small.yaml");
        std::fs::write(&small, "a: 1\n").unwrap();
        assert_eq!(read_config_text(&small).unwrap(), "a: 1\n");
        let big = dir.path().join("big.yaml");
        std::fs::write(&big, vec![b'#'; MAX_CONFIG_BYTES as usize + 1]).unwrap();
        let e = read_config_text(&big).unwrap_err().to_string();
        assert!(
            e.contains("big.yaml: 1048577 bytes, more than the 1048576 bytes (1 MiB)")
                && e.contains("MAX_CONFIG_BYTES"),
            "{e}"
        );
        let e = read_config_text(dir.path()).unwrap_err().to_string();
        assert!(e.contains("not a regular file but a directory"), "{e}");
        let e = read_config_text(&dir.path().join("none.yaml")).unwrap_err();
        assert!(e.is_missing(), "{e}");
        #[cfg(unix)]
        {
            let zero = dir.path().join("zero.yaml");
            std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
            let e = read_config_text(&zero).unwrap_err().to_string();
            assert!(
                e.contains("zero.yaml: not a regular file but a character device"),
                "{e}"
            );
        }
    }
}
