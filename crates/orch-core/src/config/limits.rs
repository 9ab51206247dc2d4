//! Limits on the configuration orch reads, each refused with its name and value in the
//! message, so that no input costs more than time linear in its size: a file that is not a
//! regular one, or is past [`MAX_CONFIG_BYTES`], is not read; YAML nested past
//! [`MAX_YAML_DEPTH`] is not parsed (the depth is measured in one pass before the parser, whose
//! cost grows faster than the depth), nor YAML whose aliases expand it past
//! [`MAX_YAML_NODES`] or [`MAX_YAML_EXPANDED_BYTES`]; and a sweep past [`MAX_SWEEP_VALUES`] is
//! not expanded. The file and YAML limits are `orch_memory::input`'s, which the model table,
//! datasets and model `config.json` files are read under too; here they become
//! [`ConfigError`]s.

use std::path::Path;

use orch_memory::input::{InputError, InputErrorKind};
pub use orch_memory::input::{
    MAX_CONFIG_BYTES, MAX_YAML_DEPTH, MAX_YAML_EXPANDED_BYTES, MAX_YAML_NODES, too_deep,
};

use crate::error::ConfigError;

/// The most values one sweep may have: each member is a run with its own directory.
pub const MAX_SWEEP_VALUES: usize = 10_000;

/// Refuse `text` (from `origin`) when it is larger than [`MAX_CONFIG_BYTES`], nests deeper
/// than [`MAX_YAML_DEPTH`] or its aliases expand it past [`MAX_YAML_NODES`] or
/// [`MAX_YAML_EXPANDED_BYTES`].
pub fn check_yaml(origin: &str, text: &str) -> Result<(), ConfigError> {
    check_size(origin, text.len() as u64)?;
    orch_memory::input::check_yaml(text).map_err(|limit| ConfigError::Parse {
        origin: origin.to_string(),
        location: limit.line().map(|line| (line, 1)),
        message: limit.to_string(),
    })
}

/// Refuse a text of `len` bytes larger than [`MAX_CONFIG_BYTES`], in the words a file's
/// refusal has.
pub fn check_size(origin: &str, len: u64) -> Result<(), ConfigError> {
    if len > MAX_CONFIG_BYTES {
        let kind = InputErrorKind::TooLarge {
            size: Some(len),
            limit: MAX_CONFIG_BYTES,
            name: "MAX_CONFIG_BYTES",
        };
        return Err(ConfigError::Other {
            origin: origin.to_string(),
            message: kind.to_string(),
        });
    }
    Ok(())
}

/// The bytes of the configuration file at `path` (`None` when there is none), refused when it
/// is not a regular file (a FIFO, `/dev/zero`) or is larger than [`MAX_CONFIG_BYTES`], before
/// more than the limit is read.
pub fn read_file(path: &Path) -> Result<Option<Vec<u8>>, ConfigError> {
    match orch_memory::input::read_bounded(path, MAX_CONFIG_BYTES, "MAX_CONFIG_BYTES") {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.is_missing() => Ok(None),
        Err(e) => Err(input_error(e)),
    }
}

/// A YAML file orch wrote itself into a run directory (`plan.yaml`, `climb.yaml`), read back
/// under the same limits as a configuration: a damaged or replaced file (a FIFO, a 10 GB file,
/// an alias bomb) is refused with its path, not read whole or expanded.
pub fn read_run_yaml<T: serde::de::DeserializeOwned>(path: &Path) -> anyhow::Result<T> {
    use anyhow::Context;
    let text = orch_memory::input::read_config_text(path)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {}", path.display(), e.kind))?;
    let origin = path.display().to_string();
    check_yaml(&origin, &text)?;
    serde_yaml::from_str(&text).with_context(|| format!("cannot parse {origin}"))
}

/// An input file refused or unreadable, as a configuration error naming it.
pub fn input_error(e: InputError) -> ConfigError {
    match e.kind {
        InputErrorKind::Io(source) => ConfigError::Io {
            path: e.path,
            source,
        },
        kind => ConfigError::Other {
            origin: e.path.display().to_string(),
            message: kind.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_built_in_file_is_well_within_the_limits() {
        for dir in [
            super::super::BUILTIN_EXPERIMENTS.clone(),
            super::super::BUILTIN_PROFILES.clone(),
            super::super::BUILTIN_LADDERS.clone(),
        ] {
            for file in dir.files() {
                let text = file.contents_utf8().unwrap();
                let origin = file.path().display().to_string();
                assert_eq!(too_deep(text, 8), None, "{origin}");
                check_yaml(&origin, text).unwrap();
            }
        }
    }
}
