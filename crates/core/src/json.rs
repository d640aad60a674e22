//! Strict JSON: every TensorForge input file is read with the rule that a key may appear once
//! per object. serde_json keeps the last of two equal keys silently (`{"a":1,"a":2}` reads as
//! 2), which hides edits and merge mistakes; structs derived with serde already reject a
//! repeated field, and this check extends the rule to free-form objects (graph attributes,
//! Hugging Face configs, ingested benchmark files). It walks the text once with serde's
//! visitor, keeping nothing but the keys of the object being read.

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::collections::HashSet;
use std::fmt;

/// Check that no JSON object in `text` repeats a key; the error names the key and its path
/// (`$.nodes[3].attrs`). Malformed JSON is left to the caller's parser (no error here).
///
/// ```
/// use tensorforge_core::json::reject_duplicate_keys;
/// assert!(reject_duplicate_keys(r#"{"a": 1, "b": {"a": 2}}"#).is_ok());
/// let e = reject_duplicate_keys(r#"{"x": [{"k": 1, "k": 2}]}"#).unwrap_err();
/// assert!(e.contains("`k`") && e.contains("$.x[0]"), "{e}");
/// ```
pub fn reject_duplicate_keys(text: &str) -> Result<(), String> {
    let mut de = serde_json::Deserializer::from_str(text);
    match (Strict {
        path: "$".to_string(),
    })
    .deserialize(&mut de)
    {
        Ok(()) => Ok(()),
        Err(e) => {
            let msg = e.to_string();
            match msg.find("duplicate key") {
                Some(i) => Err(msg[i..]
                    .split(" at line ")
                    .next()
                    .unwrap_or(&msg[i..])
                    .to_string()),
                None => Ok(()),
            }
        }
    }
}

struct Strict {
    path: String,
}

impl<'de> DeserializeSeed<'de> for Strict {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Strict {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0usize;
        while seq
            .next_element_seed(Strict {
                path: format!("{}[{i}]", self.path),
            })?
            .is_some()
        {
            i += 1;
        }
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = HashSet::new();
        while let Some(k) = map.next_key::<String>()? {
            if !seen.insert(k.clone()) {
                let _ = map.next_value::<IgnoredAny>();
                return Err(serde::de::Error::custom(format!(
                    "duplicate key `{k}` in the object at {}",
                    self.path
                )));
            }
            map.next_value_seed(Strict {
                path: format!("{}.{k}", self.path),
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_keys_are_named_with_their_path() {
        let e = reject_duplicate_keys(r#"{"nodes":[{"name":"a"},{"name":"b","name":"c"}]}"#)
            .unwrap_err();
        assert_eq!(e, "duplicate key `name` in the object at $.nodes[1]");
        assert!(reject_duplicate_keys(r#"{"a":{"b":1},"c":{"b":2}}"#).is_ok());
        // Malformed text is the parser's business.
        assert!(reject_duplicate_keys("{").is_ok());
    }
}
