//! A bounded pre-pass over the protobuf wire format, run before prost decodes anything.
//!
//! Protobuf lets a few bytes expand into a much larger decoded value (an empty repeated
//! message is 2 bytes on the wire and a whole struct in memory; a 1-byte varint becomes an
//! `i64`). This walk follows exactly the fields that [`super::proto`] declares, counts the
//! graph's nodes and estimates the bytes the decoded model will occupy, so that a hostile
//! file is refused before any allocation proportional to that expansion. It also finds
//! truncation early and reports the byte offset.
//!
//! The estimate is an upper bound: every decoded message, string and packed array is counted
//! twice its size, because prost grows each `Vec` by doubling (a vector can hold up to twice
//! the capacity it needs). Subgraphs (`If` branches) are walked too, their nodes counted with
//! the main graph's, and messages may nest at most [`MAX_DEPTH`] deep (prost's own limit is
//! 100), so a file of nested branches cannot exhaust the stack.

use super::proto;
use std::mem::size_of;

/// The deepest message nesting walked: an `If` branch costs 3 (attribute, graph, node).
pub const MAX_DEPTH: usize = 96;

/// What the scan found.
#[derive(Debug, Default, Clone, Copy)]
pub struct Tally {
    /// Nodes of the main graph.
    pub nodes: u64,
    /// Estimated bytes of the decoded messages.
    pub decoded_bytes: u64,
}

#[derive(Clone, Copy, PartialEq)]
enum Msg {
    Model,
    Opset,
    Graph,
    Node,
    Attr,
    Tensor,
    StrStr,
    ValueInfo,
    Type,
    TypeTensor,
    Shape,
    Dim,
}

/// How a declared field decodes.
#[derive(Clone, Copy)]
enum Field {
    Message(Msg),
    /// A string or bytes field (singular or repeated).
    Bytes,
    /// A scalar; `repeated` scalars may arrive packed. The value is the decoded element size.
    Scalar {
        repeated: bool,
        size: u64,
    },
}

fn struct_size(m: Msg) -> u64 {
    (match m {
        Msg::Model => size_of::<proto::ModelProto>(),
        Msg::Opset => size_of::<proto::OperatorSetIdProto>(),
        Msg::Graph => size_of::<proto::GraphProto>(),
        Msg::Node => size_of::<proto::NodeProto>(),
        Msg::Attr => size_of::<proto::AttributeProto>(),
        Msg::Tensor => size_of::<proto::TensorProto>(),
        Msg::StrStr => size_of::<proto::StringStringEntryProto>(),
        Msg::ValueInfo => size_of::<proto::ValueInfoProto>(),
        Msg::Type => size_of::<proto::TypeProto>(),
        Msg::TypeTensor => size_of::<proto::type_proto::Tensor>(),
        Msg::Shape => size_of::<proto::TensorShapeProto>(),
        Msg::Dim => size_of::<proto::tensor_shape_proto::Dimension>(),
    }) as u64
}

fn field(m: Msg, tag: u32) -> Option<Field> {
    use Field::*;
    let sc = |repeated: bool, size: u64| Scalar { repeated, size };
    Some(match (m, tag) {
        (Msg::Model, 1) => sc(false, 8),
        (Msg::Model, 2 | 3) => Bytes,
        (Msg::Model, 7) => Message(Msg::Graph),
        (Msg::Model, 8) => Message(Msg::Opset),
        (Msg::Opset, 1) => Bytes,
        (Msg::Opset, 2) => sc(false, 8),
        (Msg::Graph, 1) => Message(Msg::Node),
        (Msg::Graph, 2) => Bytes,
        (Msg::Graph, 5) => Message(Msg::Tensor),
        (Msg::Graph, 11..=13) => Message(Msg::ValueInfo),
        (Msg::Node, 1..=4 | 7) => Bytes,
        (Msg::Node, 5) => Message(Msg::Attr),
        (Msg::Attr, 1 | 4) => Bytes,
        (Msg::Attr, 2) => sc(false, 4),
        (Msg::Attr, 3 | 20) => sc(false, 8),
        (Msg::Attr, 5) => Message(Msg::Tensor),
        (Msg::Attr, 6) => Message(Msg::Graph),
        (Msg::Attr, 7) => sc(true, 4),
        (Msg::Attr, 8) => sc(true, 8),
        (Msg::Tensor, 1 | 7) => sc(true, 8),
        (Msg::Tensor, 2 | 14) => sc(false, 4),
        (Msg::Tensor, 4 | 5) => sc(true, 4),
        (Msg::Tensor, 8 | 9) => Bytes,
        (Msg::Tensor, 10) => sc(true, 8),
        (Msg::Tensor, 13) => Message(Msg::StrStr),
        (Msg::StrStr, 1 | 2) => Bytes,
        (Msg::ValueInfo, 1) => Bytes,
        (Msg::ValueInfo, 2) => Message(Msg::Type),
        (Msg::Type, 1) => Message(Msg::TypeTensor),
        (Msg::TypeTensor, 1) => sc(false, 4),
        (Msg::TypeTensor, 2) => Message(Msg::Shape),
        (Msg::Shape, 1) => Message(Msg::Dim),
        (Msg::Dim, 1) => sc(false, 8),
        (Msg::Dim, 2) => Bytes,
        _ => return None,
    })
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Offset of `buf` in the file, for messages.
    base: usize,
}

impl Reader<'_> {
    fn varint(&mut self) -> Result<u64, String> {
        let mut v: u64 = 0;
        for i in 0..10 {
            let b = *self
                .buf
                .get(self.pos)
                .ok_or_else(|| format!("truncated varint at byte {}", self.base + self.pos))?;
            self.pos += 1;
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(format!(
            "varint longer than 10 bytes at byte {}",
            self.base + self.pos
        ))
    }

    fn skip(&mut self, n: u64) -> Result<usize, String> {
        let start = self.pos;
        let end = (self.pos as u64)
            .checked_add(n)
            .filter(|&e| e <= self.buf.len() as u64)
            .ok_or_else(|| {
                format!(
                    "field at byte {} needs {n} bytes, only {} remain (truncated file?)",
                    self.base + start,
                    self.buf.len() - start
                )
            })?;
        self.pos = end as usize;
        Ok(start)
    }
}

/// Walk a `ModelProto`, counting and estimating; `max_nodes` and `max_decoded` stop the
/// walk as soon as they are exceeded.
pub fn scan_model(buf: &[u8], max_nodes: u64, max_decoded: u64) -> Result<Tally, String> {
    let mut t = Tally {
        nodes: 0,
        decoded_bytes: struct_size(Msg::Model),
    };
    walk(buf, 0, Msg::Model, &mut t, max_nodes, max_decoded, 0)?;
    Ok(t)
}

fn walk(
    buf: &[u8],
    base: usize,
    m: Msg,
    t: &mut Tally,
    max_nodes: u64,
    max_decoded: u64,
    depth: usize,
) -> Result<(), String> {
    if depth > MAX_DEPTH {
        return Err(format!(
            "messages nest more than {MAX_DEPTH} deep at byte {base} (nested subgraphs)"
        ));
    }
    let mut r = Reader { buf, pos: 0, base };
    while r.pos < buf.len() {
        let at = base + r.pos;
        let key = r.varint()?;
        let tag = key >> 3;
        let wire = key & 7;
        if tag == 0 || tag > u64::from(u32::MAX >> 3) {
            return Err(format!("invalid field number {tag} at byte {at}"));
        }
        let decl = field(m, tag as u32);
        let add = match wire {
            0 => {
                r.varint()
                    .map_err(|e| format!("{e} (field {tag} at byte {at})"))?;
                match decl {
                    Some(Field::Scalar {
                        repeated: true,
                        size,
                    }) => 2 * size,
                    _ => 0,
                }
            }
            1 | 5 => {
                let n = if wire == 1 { 8 } else { 4 };
                r.skip(n).map_err(|e| format!("{e} (field {tag})"))?;
                match decl {
                    Some(Field::Scalar {
                        repeated: true,
                        size,
                    }) => 2 * size,
                    _ => 0,
                }
            }
            2 => {
                let len = r
                    .varint()
                    .map_err(|e| format!("{e} (field {tag} at byte {at})"))?;
                let start = r
                    .skip(len)
                    .map_err(|e| format!("{e} (field {tag} at byte {at})"))?;
                let body = &buf[start..r.pos];
                match decl {
                    Some(Field::Message(sub)) => {
                        if m == Msg::Graph && sub == Msg::Node {
                            t.nodes += 1;
                            if t.nodes > max_nodes {
                                return Err(format!(
                                    "the graph has more than {max_nodes} nodes (the import limit)"
                                ));
                            }
                        }
                        t.decoded_bytes = t.decoded_bytes.saturating_add(2 * struct_size(sub));
                        walk(
                            body,
                            base + start,
                            sub,
                            t,
                            max_nodes,
                            max_decoded,
                            depth + 1,
                        )?;
                        0
                    }
                    Some(Field::Bytes) => 2 * (24 + len),
                    Some(Field::Scalar {
                        repeated: true,
                        size,
                    }) => {
                        // Packed: fixed-width floats decode to their own size; varints
                        // are counted by their terminating bytes.
                        2 * if matches!((m, tag), (Msg::Attr, 7) | (Msg::Tensor, 4 | 10)) {
                            len
                        } else {
                            body.iter().filter(|&&b| b & 0x80 == 0).count() as u64 * size
                        }
                    }
                    _ => 0,
                }
            }
            3 | 4 => {
                return Err(format!(
                    "unsupported protobuf group (wire type {wire}) at byte {at}"
                ))
            }
            _ => return Err(format!("invalid wire type {wire} at byte {at}")),
        };
        t.decoded_bytes = t.decoded_bytes.saturating_add(add);
        if t.decoded_bytes > max_decoded {
            return Err(format!(
                "the decoded model would need more than {max_decoded} bytes of memory (the import limit)"
            ));
        }
    }
    Ok(())
}
