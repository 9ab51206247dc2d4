//! `--set KEY=VALUE`: one command-line override, before it is known what it overrides.

use serde_yaml::Value;

/// One `--set KEY=VALUE`.
#[derive(Debug, Clone, PartialEq)]
pub struct SetArg {
    pub key: String,
    pub value: Value,
    /// What was typed after `=` (environment values are taken as typed).
    pub raw: String,
}

impl SetArg {
    /// `key=value`, the value a plain string.
    pub fn text(key: &str, value: &str) -> SetArg {
        SetArg {
            key: key.to_string(),
            value: Value::String(value.to_string()),
            raw: value.to_string(),
        }
    }
}

impl std::str::FromStr for SetArg {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (key, raw) = s
            .split_once('=')
            .ok_or_else(|| format!("`{s}` is not KEY=VALUE"))?;
        if key.is_empty() {
            return Err(format!("`{s}` has an empty key"));
        }
        // Parse the value as a YAML scalar so `0.5` is a number and `true` a bool, and a YAML
        // flow list or map (`[console,wandb]`, `{a: 1}`) as that list or map; anything else
        // stays the literal string the user typed. One past the YAML limits (an alias named
        // thousands of times) is refused rather than expanded.
        let parsed = orch_memory::input::parse_value(raw);
        if let Err(orch_memory::input::ValueError::Limit(limit)) = &parsed {
            return Err(format!("the value of `{key}`: {limit}"));
        }
        let value = match parsed {
            Ok(v @ (Value::Bool(_) | Value::Number(_) | Value::Null)) if !raw.is_empty() => v,
            Ok(v @ Value::Sequence(_)) if raw.trim_start().starts_with('[') => v,
            Ok(v @ Value::Mapping(_)) if raw.trim_start().starts_with('{') => v,
            _ => Value::String(raw.to_string()),
        };
        Ok(SetArg {
            key: key.to_string(),
            value,
            raw: raw.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_values_are_yaml_scalars_but_keep_what_was_typed() {
        let s: SetArg = "data.train_batch_size=512".parse().unwrap();
        assert_eq!(s.value, Value::from(512));
        let s: SetArg = "env.MASK=0x1F".parse().unwrap();
        assert_eq!(s.raw, "0x1F");
        let s: SetArg = "trainer.experiment_name=x$(touch /tmp/p)".parse().unwrap();
        assert_eq!(s.value, Value::from("x$(touch /tmp/p)"));
        let s: SetArg = "trainer.logger=[console,wandb]".parse().unwrap();
        assert_eq!(
            s.value,
            serde_yaml::from_str::<Value>("[console, wandb]").unwrap()
        );
        let s: SetArg = "m.arch={hidden_size: 896}".parse().unwrap();
        assert!(s.value.is_mapping());
        // Not a flow collection: a string, even when YAML would read a block list.
        let s: SetArg = "n.x=- a".parse().unwrap();
        assert_eq!(s.value, Value::from("- a"));
        assert!("novalue".parse::<SetArg>().is_err());
        assert!("=3".parse::<SetArg>().is_err());
    }
}
