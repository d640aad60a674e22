//! NumPy `.npy` encoding and decoding on byte buffers (no file I/O): format versions 1.0
//! and 2.0, little-endian `float32`, `float64`, `uint8`, `int8`, `int32`, `int64` and `bool`
//! (read as `uint8` 0/1), C order. The header is a
//! Python dict literal; this parser accepts exactly the keys `descr`, `fortran_order` and
//! `shape` with string, boolean and integer-tuple values, bounded to [`MAX_HEADER_BYTES`],
//! and requires the data to be exactly shape-product × item-size bytes. Not supported:
//! version 3.0 (UTF-8 headers), big-endian or other dtypes, Fortran order, object arrays,
//! `.npz` archives.

use crate::{checked_numel, KernelError};
use serde::{Deserialize, Serialize};

/// Largest header accepted (NumPy's own default limit is 10 000 bytes).
pub const MAX_HEADER_BYTES: usize = 65_536;

const MAGIC: &[u8] = b"\x93NUMPY";

/// The element data of an array.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum NpyData {
    /// `<f4`
    F32(Vec<f32>),
    /// `<f8`
    F64(Vec<f64>),
    /// `|u1`
    U8(Vec<u8>),
    /// `|i1`
    I8(Vec<i8>),
    /// `<i4`
    I32(Vec<i32>),
    /// `<i8` (token ids, ONNX index tensors)
    I64(Vec<i64>),
}

impl NpyData {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            NpyData::F32(v) => v.len(),
            NpyData::F64(v) => v.len(),
            NpyData::U8(v) => v.len(),
            NpyData::I8(v) => v.len(),
            NpyData::I32(v) => v.len(),
            NpyData::I64(v) => v.len(),
        }
    }

    /// True when there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// NumPy dtype name (`float32`, `float64`, `uint8`, `int8`, `int32`, `int64`).
    pub fn dtype_name(&self) -> &'static str {
        match self {
            NpyData::F32(_) => "float32",
            NpyData::F64(_) => "float64",
            NpyData::U8(_) => "uint8",
            NpyData::I8(_) => "int8",
            NpyData::I32(_) => "int32",
            NpyData::I64(_) => "int64",
        }
    }

    fn descr(&self) -> &'static str {
        match self {
            NpyData::F32(_) => "<f4",
            NpyData::F64(_) => "<f8",
            NpyData::U8(_) => "|u1",
            NpyData::I8(_) => "|i1",
            NpyData::I32(_) => "<i4",
            NpyData::I64(_) => "<i8",
        }
    }
}

/// A C-order array: `shape` (empty for a 0-d scalar) and its data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NpyArray {
    /// Dimensions, outermost first.
    pub shape: Vec<usize>,
    /// Elements in C (row-major) order; length = product of `shape`.
    pub data: NpyData,
}

impl NpyArray {
    /// An array after checking that the data length equals the shape product.
    pub fn new(shape: Vec<usize>, data: NpyData) -> Result<Self, KernelError> {
        let n = checked_numel(&shape)?;
        if n != data.len() {
            return Err(KernelError::Npy(format!(
                "shape {shape:?} holds {n} elements but {} were given",
                data.len()
            )));
        }
        Ok(NpyArray { shape, data })
    }
}

fn err<T>(msg: impl Into<String>) -> Result<T, KernelError> {
    Err(KernelError::Npy(msg.into()))
}

// ---- header parsing ---------------------------------------------------------------------

#[derive(Debug, PartialEq)]
enum Value {
    Str(String),
    Bool(bool),
    Tuple(Vec<usize>),
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl<'a> Parser<'a> {
    fn ws(&mut self) {
        while self.i < self.s.len() && matches!(self.s[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.s.get(self.i).copied()
    }

    fn expect(&mut self, c: u8) -> Result<(), KernelError> {
        if self.peek() == Some(c) {
            self.i += 1;
            Ok(())
        } else {
            err(format!(
                "header: expected `{}` at byte {}",
                c as char, self.i
            ))
        }
    }

    fn string(&mut self) -> Result<String, KernelError> {
        let q = match self.peek() {
            Some(q @ (b'\'' | b'"')) => q,
            _ => return err(format!("header: expected a string at byte {}", self.i)),
        };
        self.i += 1;
        let start = self.i;
        while self.i < self.s.len() && self.s[self.i] != q {
            self.i += 1;
        }
        if self.i >= self.s.len() {
            return err("header: unterminated string");
        }
        let v = String::from_utf8_lossy(&self.s[start..self.i]).into_owned();
        self.i += 1;
        Ok(v)
    }

    fn value(&mut self) -> Result<Value, KernelError> {
        match self.peek() {
            Some(b'\'' | b'"') => Ok(Value::Str(self.string()?)),
            Some(b'(') => {
                self.i += 1;
                let mut dims = Vec::new();
                loop {
                    match self.peek() {
                        Some(b')') => {
                            self.i += 1;
                            break;
                        }
                        Some(b'0'..=b'9') => {
                            let start = self.i;
                            while self.i < self.s.len() && self.s[self.i].is_ascii_digit() {
                                self.i += 1;
                            }
                            let txt = std::str::from_utf8(&self.s[start..self.i]).unwrap_or("");
                            let d: usize = txt.parse().map_err(|_| {
                                KernelError::Npy(format!("header: dimension `{txt}` too large"))
                            })?;
                            dims.push(d);
                            if self.s.get(self.i) == Some(&b'L') {
                                self.i += 1; // Python 2 long suffix
                            }
                            match self.peek() {
                                Some(b',') => self.i += 1,
                                Some(b')') => {}
                                _ => return err("header: malformed shape tuple"),
                            }
                        }
                        _ => return err("header: shape must be a tuple of non-negative integers"),
                    }
                    if dims.len() > 64 {
                        return err("header: more than 64 dimensions");
                    }
                }
                Ok(Value::Tuple(dims))
            }
            _ => {
                let rest = &self.s[self.i..];
                if rest.starts_with(b"True") {
                    self.i += 4;
                    Ok(Value::Bool(true))
                } else if rest.starts_with(b"False") {
                    self.i += 5;
                    Ok(Value::Bool(false))
                } else {
                    err(format!("header: unsupported value at byte {}", self.i))
                }
            }
        }
    }
}

fn parse_header(h: &[u8]) -> Result<(String, bool, Vec<usize>), KernelError> {
    if !h.is_ascii() {
        return err("header is not ASCII");
    }
    let mut p = Parser { s: h, i: 0 };
    p.expect(b'{')?;
    let (mut descr, mut fortran, mut shape) = (None, None, None);
    loop {
        if p.peek() == Some(b'}') {
            p.i += 1;
            break;
        }
        let key = p.string()?;
        p.expect(b':')?;
        let v = p.value()?;
        match (key.as_str(), v) {
            ("descr", Value::Str(s)) => descr = Some(s),
            ("fortran_order", Value::Bool(b)) => fortran = Some(b),
            ("shape", Value::Tuple(t)) => shape = Some(t),
            (k, v) => return err(format!("header: unexpected entry `{k}`: {v:?}")),
        }
        match p.peek() {
            Some(b',') => p.i += 1,
            Some(b'}') => {}
            _ => return err("header: expected `,` or `}`"),
        }
    }
    if p.peek().is_some() {
        return err("header: trailing characters after the dict");
    }
    match (descr, fortran, shape) {
        (Some(d), Some(f), Some(s)) => Ok((d, f, s)),
        _ => err("header: needs `descr`, `fortran_order` and `shape`"),
    }
}

/// Decode a `.npy` buffer (v1.0 / v2.0, little-endian f32/f64/u8/i8, C order).
pub fn parse_npy(bytes: &[u8]) -> Result<NpyArray, KernelError> {
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        return err("not a .npy file (missing \\x93NUMPY magic)");
    }
    let (major, minor) = (bytes[6], bytes[7]);
    let (hlen, start) = match major {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10usize),
        2 => {
            if bytes.len() < 12 {
                return err("truncated v2.0 header length");
            }
            let l = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
            (usize::try_from(l).unwrap_or(usize::MAX), 12usize)
        }
        _ => {
            return err(format!(
                "unsupported format version {major}.{minor} (1.0 and 2.0 are)"
            ))
        }
    };
    if hlen > MAX_HEADER_BYTES {
        return err(format!(
            "header of {hlen} bytes exceeds the {MAX_HEADER_BYTES}-byte limit"
        ));
    }
    let end = start + hlen;
    if bytes.len() < end {
        return err(format!(
            "truncated header: {hlen} bytes declared, {} present",
            bytes.len() - start
        ));
    }
    let (descr, fortran, shape) = parse_header(&bytes[start..end])?;
    if fortran {
        return err("Fortran-order arrays are not supported (save with C order)");
    }
    let body = &bytes[end..];
    let n = checked_numel(&shape)?;
    let item = match descr.as_str() {
        "<f2" => 2,
        "<f4" | "<i4" => 4,
        "<f8" | "<i8" => 8,
        "|u1" | "<u1" | "u1" | "|i1" | "<i1" | "i1" | "|b1" => 1,
        ">f2" | ">f4" | ">f8" | ">i4" | ">i8" => {
            return err(format!("big-endian dtype `{descr}` is not supported"))
        }
        d => {
            return err(format!(
            "dtype `{d}` is not supported (float16, float32, float64, uint8, int8, int32, int64, bool are)"
        ))
        }
    };
    let need = n.checked_mul(item).ok_or(KernelError::ShapeOverflow {
        shape: shape.clone(),
    })?;
    if body.len() != need {
        return err(format!(
            "shape {shape:?} of `{descr}` needs {need} data bytes, found {}",
            body.len()
        ));
    }
    let data = match descr.as_str() {
        // float16 (an fp16 model's inputs) is widened to float32, exactly.
        "<f2" => NpyData::F32(
            body.chunks_exact(2)
                .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
        ),
        "<f4" => NpyData::F32(
            body.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        ),
        "<f8" => NpyData::F64(
            body.chunks_exact(8)
                .map(|c| f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
                .collect(),
        ),
        "<i4" => NpyData::I32(
            body.chunks_exact(4)
                .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        ),
        "<i8" => NpyData::I64(
            body.chunks_exact(8)
                .map(|c| i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
                .collect(),
        ),
        "|b1" => {
            if let Some(b) = body.iter().find(|&&b| b > 1) {
                return err(format!(
                    "bool array holds the byte {b} (only 0 and 1 are valid)"
                ));
            }
            NpyData::U8(body.to_vec())
        }
        d if d.contains('u') => NpyData::U8(body.to_vec()),
        _ => NpyData::I8(body.iter().map(|&b| b as i8).collect()),
    };
    Ok(NpyArray { shape, data })
}

/// Encode as `.npy`: version 1.0 unless the header needs 2.0; header padded with spaces and a
/// newline so the data starts at a multiple of 64 bytes, as NumPy writes it.
pub fn to_npy(a: &NpyArray) -> Result<Vec<u8>, KernelError> {
    let n = checked_numel(&a.shape)?;
    if n != a.data.len() {
        return err(format!(
            "shape {:?} holds {n} elements but the data has {}",
            a.shape,
            a.data.len()
        ));
    }
    let shape = match a.shape.len() {
        0 => "()".to_string(),
        1 => format!("({},)", a.shape[0]),
        _ => format!(
            "({})",
            a.shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let dict = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': {shape}, }}",
        a.data.descr()
    );
    let build = |prefix: usize| {
        let unpadded = prefix + dict.len() + 1;
        let pad = (64 - unpadded % 64) % 64;
        let mut h = dict.clone();
        h.push_str(&" ".repeat(pad));
        h.push('\n');
        h
    };
    let mut h = build(10);
    let mut out = Vec::new();
    out.extend_from_slice(MAGIC);
    if h.len() <= u16::MAX as usize {
        out.extend_from_slice(&[1, 0]);
        out.extend_from_slice(&(h.len() as u16).to_le_bytes());
    } else {
        h = build(12);
        let l = u32::try_from(h.len()).map_err(|_| KernelError::Npy("header too large".into()))?;
        out.extend_from_slice(&[2, 0]);
        out.extend_from_slice(&l.to_le_bytes());
    }
    out.extend_from_slice(h.as_bytes());
    match &a.data {
        NpyData::F32(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        NpyData::F64(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        NpyData::U8(v) => out.extend_from_slice(v),
        NpyData::I8(v) => out.extend(v.iter().map(|&x| x as u8)),
        NpyData::I32(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        NpyData::I64(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `np.save(f, np.array([1.0, 2.0], dtype='<f4'))` writes: magic, version 1.0,
    /// header length 118 (10 + 118 = 128, a multiple of 64), the dict, spaces, newline, data.
    fn numpy_bytes() -> Vec<u8> {
        let dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
        let mut h = dict.to_string();
        while h.len() < 117 {
            h.push(' ');
        }
        h.push('\n');
        let mut b = b"\x93NUMPY\x01\x00".to_vec();
        b.extend_from_slice(&118u16.to_le_bytes());
        b.extend_from_slice(h.as_bytes());
        b.extend_from_slice(&1.0f32.to_le_bytes());
        b.extend_from_slice(&2.0f32.to_le_bytes());
        b
    }

    #[test]
    fn reads_and_writes_numpy_layout() {
        let b = numpy_bytes();
        let a = parse_npy(&b).unwrap();
        assert_eq!(a.shape, vec![2]);
        assert_eq!(a.data, NpyData::F32(vec![1.0, 2.0]));
        assert_eq!(to_npy(&a).unwrap(), b);
    }

    #[test]
    fn float16_is_read_widened_to_float32() {
        // np.array([1.0, -2.5, 65504.0], dtype='<f2'): 0x3c00, 0xc100, 0x7bff.
        let dict = "{'descr': '<f2', 'fortran_order': False, 'shape': (3,), }";
        let mut h = dict.to_string();
        while h.len() < 117 {
            h.push(' ');
        }
        h.push('\n');
        let mut b = b"\x93NUMPY\x01\x00".to_vec();
        b.extend_from_slice(&118u16.to_le_bytes());
        b.extend_from_slice(h.as_bytes());
        for bits in [0x3c00u16, 0xc100, 0x7bff] {
            b.extend_from_slice(&bits.to_le_bytes());
        }
        let a = parse_npy(&b).unwrap();
        assert_eq!(a.data, NpyData::F32(vec![1.0, -2.5, 65504.0]));
    }

    #[test]
    fn round_trips_every_dtype_and_rank() {
        let cases = vec![
            NpyArray::new(vec![], NpyData::F64(vec![-0.5])).unwrap(),
            NpyArray::new(vec![2, 3], NpyData::U8(vec![0, 1, 2, 253, 254, 255])).unwrap(),
            NpyArray::new(vec![3, 1, 2], NpyData::I8(vec![-128, -1, 0, 1, 126, 127])).unwrap(),
            NpyArray::new(vec![0, 4], NpyData::F32(vec![])).unwrap(),
            NpyArray::new(vec![2], NpyData::F32(vec![f32::NAN, f32::NEG_INFINITY])).unwrap(),
            NpyArray::new(vec![3], NpyData::I32(vec![i32::MIN, -1, i32::MAX])).unwrap(),
            NpyArray::new(vec![1, 2], NpyData::I64(vec![i64::MIN, 50_000])).unwrap(),
        ];
        for a in cases {
            let b = to_npy(&a).unwrap();
            let hl = u16::from_le_bytes([b[8], b[9]]) as usize;
            assert_eq!((10 + hl) % 64, 0);
            let back = parse_npy(&b).unwrap();
            assert_eq!(back.shape, a.shape);
            // compare bitwise so NaN round-trips count
            assert_eq!(to_npy(&back).unwrap(), b);
        }
    }

    #[test]
    fn reads_version_2_and_python2_longs() {
        let dict = b"{'descr': '|u1', 'fortran_order': False, 'shape': (3L,)}\n";
        let mut b = b"\x93NUMPY\x02\x00".to_vec();
        b.extend_from_slice(&(dict.len() as u32).to_le_bytes());
        b.extend_from_slice(dict);
        b.extend_from_slice(&[7, 8, 9]);
        let a = parse_npy(&b).unwrap();
        assert_eq!((a.shape, a.data), (vec![3], NpyData::U8(vec![7, 8, 9])));
    }

    #[test]
    fn reads_numpy_int64_and_bool() {
        // np.array([3, -1], dtype=np.int64): two little-endian 8-byte words.
        let mut data = 3i64.to_le_bytes().to_vec();
        data.extend_from_slice(&(-1i64).to_le_bytes());
        let b = with_header(
            "{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }\n",
            &data,
        );
        assert_eq!(parse_npy(&b).unwrap().data, NpyData::I64(vec![3, -1]));
        // np.array([True, False]): bytes 1, 0, read as uint8.
        let b = with_header(
            "{'descr': '|b1', 'fortran_order': False, 'shape': (2,), }\n",
            &[1, 0],
        );
        assert_eq!(parse_npy(&b).unwrap().data, NpyData::U8(vec![1, 0]));
        let b = with_header(
            "{'descr': '|b1', 'fortran_order': False, 'shape': (1,), }\n",
            &[2],
        );
        assert!(parse_npy(&b).unwrap_err().to_string().contains("byte 2"));
    }

    fn with_header(dict: &str, data: &[u8]) -> Vec<u8> {
        let mut b = b"\x93NUMPY\x01\x00".to_vec();
        b.extend_from_slice(&(dict.len() as u16).to_le_bytes());
        b.extend_from_slice(dict.as_bytes());
        b.extend_from_slice(data);
        b
    }

    #[test]
    fn malformed_input_is_a_clear_error() {
        let msg = |b: &[u8]| match parse_npy(b) {
            Err(e) => e.to_string(),
            Ok(a) => panic!("accepted {a:?}"),
        };
        assert!(msg(b"hello").contains("magic"));
        assert!(msg(b"\x93NUMPY\x03\x00\x00\x00\x00\x00").contains("version 3.0"));
        let mut big = b"\x93NUMPY\x02\x00".to_vec();
        big.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(msg(&big).contains("limit"));
        let mut trunc = numpy_bytes();
        trunc.truncate(50);
        assert!(msg(&trunc).contains("truncated"));
        let mut short = numpy_bytes();
        short.pop();
        assert!(msg(&short).contains("needs 8 data bytes, found 7"));
        let mut long = numpy_bytes();
        long.push(0);
        assert!(msg(&long).contains("found 9"));
        let d = "{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }";
        assert!(msg(&with_header(d, &[0; 4])).contains("big-endian"));
        let d = "{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }";
        assert!(msg(&with_header(d, &[0; 8])).contains("not supported"));
        let d = "{'descr': '<f4', 'fortran_order': True, 'shape': (1,), }";
        assert!(msg(&with_header(d, &[0; 4])).contains("Fortran"));
        let d = "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }";
        assert!(msg(&with_header(d, &[])).contains("too large"));
        let d = "{'descr': '|u1', 'fortran_order': False, 'shape': (4294967296, 4294967296, 4294967296), }";
        assert!(parse_npy(&with_header(d, &[])).is_err());
        let d = "{'descr': '<f4', 'shape': (1,), }";
        assert!(msg(&with_header(d, &[0; 4])).contains("needs"));
        let d = "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}";
        assert!(parse_npy(&with_header(d, &[0; 4])).is_err());
        let d = "{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }";
        assert!(parse_npy(&with_header(d, &[0; 4])).is_err());
        assert!(NpyArray::new(vec![2, 2], NpyData::U8(vec![1])).is_err());
    }
}
