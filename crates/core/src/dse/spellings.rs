//! Friendly TOML spellings for the design space's lists: PE shapes as `[rows, cols]` or
//! `"ROWSxCOLS"`, loop orders by name, letters or loop list, dataflows by name or short
//! form. Serialization writes one canonical form; checking the values is `types`' job.

pub(super) mod serde_pe_shapes {
    use serde::de::{self, SeqAccess, Visitor};
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use std::fmt;

    pub fn serialize<S: Serializer>(v: &[(u64, u64)], s: S) -> Result<S::Ok, S::Error> {
        v.serialize(s)
    }

    struct Shape((u64, u64));

    impl<'de> Deserialize<'de> for Shape {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Shape;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("a PE shape: [rows, cols] or \"ROWSxCOLS\"")
                }
                fn visit_str<E: de::Error>(self, s: &str) -> Result<Shape, E> {
                    let parts: Vec<&str> = s.split(['x', 'X', '×']).collect();
                    let bad = || {
                        E::custom(format!(
                            "pe_shapes: `{s}` is not ROWSxCOLS with positive integers, e.g. 32x32"
                        ))
                    };
                    if parts.len() != 2 {
                        return Err(bad());
                    }
                    let r = parts[0].trim().parse::<u64>().map_err(|_| bad())?;
                    let c = parts[1].trim().parse::<u64>().map_err(|_| bad())?;
                    Ok(Shape((r, c)))
                }
                fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Shape, A::Error> {
                    let r: u64 = seq
                        .next_element()?
                        .ok_or_else(|| de::Error::custom("pe_shapes: expected [rows, cols]"))?;
                    let c: u64 = seq
                        .next_element()?
                        .ok_or_else(|| de::Error::custom("pe_shapes: expected [rows, cols]"))?;
                    if seq.next_element::<u64>()?.is_some() {
                        return Err(de::Error::custom(
                            "pe_shapes: expected [rows, cols], got more than two numbers",
                        ));
                    }
                    Ok(Shape((r, c)))
                }
            }
            d.deserialize_any(V)
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<(u64, u64)>, D::Error> {
        let v: Vec<Shape> = Vec::deserialize(d)?;
        Ok(v.into_iter().map(|s| s.0).collect())
    }
}

pub(super) mod serde_orders {
    use crate::schedule::LoopOrder;
    use serde::de::{self, SeqAccess, Visitor};
    use serde::{Deserialize, Deserializer, Serializer};
    use std::fmt;

    pub fn serialize<S: Serializer>(v: &[LoopOrder], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(v.iter().map(|o| o.name()))
    }

    struct Order(LoopOrder);

    impl<'de> Deserialize<'de> for Order {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Order;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("a loop order: a name such as \"c-resident\", letters such as \"nmk\", or [\"mi\", \"ni\", \"ki\"]")
                }
                fn visit_str<E: de::Error>(self, s: &str) -> Result<Order, E> {
                    LoopOrder::parse(s)
                        .map(Order)
                        .map_err(|e| E::custom(format!("orders: {e}")))
                }
                fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Order, A::Error> {
                    let mut letters = String::new();
                    while let Some(l) = seq.next_element::<String>()? {
                        letters.push_str(l.trim().trim_end_matches('i'));
                    }
                    LoopOrder::parse(&letters)
                        .map(Order)
                        .map_err(|e| de::Error::custom(format!("orders: {e}")))
                }
            }
            d.deserialize_any(V)
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<LoopOrder>, D::Error> {
        let v: Vec<Order> = Vec::deserialize(d)?;
        Ok(v.into_iter().map(|o| o.0).collect())
    }
}

pub(super) mod serde_dataflows {
    use crate::mapping::Dataflow;
    use serde::de::{self, Visitor};
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use std::fmt;

    pub fn serialize<S: Serializer>(v: &[Dataflow], s: S) -> Result<S::Ok, S::Error> {
        v.serialize(s)
    }

    struct Flow(Dataflow);

    impl<'de> Deserialize<'de> for Flow {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl Visitor<'_> for V {
                type Value = Flow;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("a dataflow: \"output-stationary\", \"weight-stationary\", \"input-stationary\" (or os, ws, is)")
                }
                fn visit_str<E: de::Error>(self, s: &str) -> Result<Flow, E> {
                    Dataflow::parse(s)
                        .map(Flow)
                        .map_err(|e| E::custom(format!("dataflows: {e}")))
                }
            }
            d.deserialize_str(V)
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Dataflow>, D::Error> {
        let v: Vec<Flow> = Vec::deserialize(d)?;
        Ok(v.into_iter().map(|f| f.0).collect())
    }
}
