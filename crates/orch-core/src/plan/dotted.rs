//! Dotted keys (`data.train_batch_size`) written into nested maps: the JSON tree that rules and
//! templates read (`config.data.train_batch_size`) and the YAML a trainer's config file gets.
//! One walk serves both value types, so the two trees cannot disagree about where a key goes.

/// A value that may be a map of string keys to values of its own type.
pub(crate) trait Nested: Sized {
    /// The value under `key`, made an empty map when absent or not a map (a later, deeper key
    /// wins over an earlier scalar); `None` when `self` is not a map.
    fn child(&mut self, key: &str) -> Option<&mut Self>;
    /// Set `key` to `value`, when `self` is a map.
    fn put(&mut self, key: &str, value: Self);
}

/// Write `value` at `key`, each `.` one level deeper. Nothing is written when `tree` is not a map.
pub(crate) fn insert_dotted<T: Nested>(tree: &mut T, key: &str, value: T) {
    let (parents, last) = match key.rsplit_once('.') {
        Some((parents, last)) => (Some(parents), last),
        None => (None, key),
    };
    let mut node = tree;
    for part in parents.into_iter().flat_map(|p| p.split('.')) {
        let Some(child) = node.child(part) else {
            return;
        };
        node = child;
    }
    node.put(last, value);
}

impl Nested for serde_json::Value {
    fn child(&mut self, key: &str) -> Option<&mut Self> {
        let serde_json::Value::Object(map) = self else {
            return None;
        };
        let child = map
            .entry(key.to_string())
            .or_insert_with(|| serde_json::Value::Object(Default::default()));
        if !child.is_object() {
            *child = serde_json::Value::Object(Default::default());
        }
        Some(child)
    }

    fn put(&mut self, key: &str, value: Self) {
        if let serde_json::Value::Object(map) = self {
            map.insert(key.to_string(), value);
        }
    }
}

impl Nested for serde_yaml::Value {
    fn child(&mut self, key: &str) -> Option<&mut Self> {
        let serde_yaml::Value::Mapping(map) = self else {
            return None;
        };
        let child = map
            .entry(key.into())
            .or_insert_with(|| serde_yaml::Value::Mapping(Default::default()));
        if !child.is_mapping() {
            *child = serde_yaml::Value::Mapping(Default::default());
        }
        Some(child)
    }

    fn put(&mut self, key: &str, value: Self) {
        if let serde_yaml::Value::Mapping(map) = self {
            map.insert(key.into(), value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_and_yaml_trees_agree() {
        let keys = [("a.b", 1), ("a.c", 2), ("a", 3), ("a.d.e", 4), ("x", 5)];
        let mut json = serde_json::json!({});
        let mut yaml = serde_yaml::Value::Mapping(Default::default());
        for (k, v) in keys {
            insert_dotted(&mut json, k, v.into());
            insert_dotted(&mut yaml, k, v.into());
        }
        // `a = 3` replaced the map, then `a.d.e` replaced the scalar again.
        assert_eq!(json, serde_json::json!({"a": {"d": {"e": 4}}, "x": 5}));
        assert_eq!(serde_json::to_value(&yaml).unwrap(), json);
    }

    #[test]
    fn nothing_is_written_into_a_scalar_root() {
        let mut json = serde_json::json!(1);
        insert_dotted(&mut json, "a.b", 2.into());
        assert_eq!(json, serde_json::json!(1));
    }
}
