//! Element types. Sizes are counted in bits so that sub-byte types (int4) are exact:
//! `bytes(n elements) = ceil(n · bits / 8)`. TF32 is a compute mode whose operands are
//! stored as 32-bit words. Block-scaled formats (MX, BLOCKFP8) and their scale bytes are
//! not modelled.

use crate::error::{CoreError, Result};
use serde::{Deserialize, Serialize};
use std::fmt;

/// An element type for operands and for per-dtype peak throughput.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// IEEE binary32.
    Fp32,
    /// TensorFloat-32 tensor-core mode; stored as 32-bit words.
    Tf32,
    /// bfloat16.
    Bf16,
    /// IEEE binary16.
    Fp16,
    /// 8-bit float (E4M3 / E5M2; the model only needs the size).
    Fp8,
    /// 8-bit integer.
    Int8,
    /// 4-bit integer, packed two per byte.
    Int4,
    /// 32-bit integer (index and shape tensors; no peak throughput is modelled for it).
    Int32,
    /// 64-bit integer (ONNX index and shape tensors, e.g. token ids).
    Int64,
    /// Boolean, one byte per element (ONNX masks).
    Bool,
}

impl DType {
    /// Every dtype, in a fixed order.
    pub const ALL: [DType; 10] = [
        DType::Fp32,
        DType::Tf32,
        DType::Bf16,
        DType::Fp16,
        DType::Fp8,
        DType::Int8,
        DType::Int4,
        DType::Int32,
        DType::Int64,
        DType::Bool,
    ];

    /// The dtypes arithmetic units have a peak for (index, shape and mask types excluded).
    pub const COMPUTE: [DType; 7] = [
        DType::Fp32,
        DType::Tf32,
        DType::Bf16,
        DType::Fp16,
        DType::Fp8,
        DType::Int8,
        DType::Int4,
    ];

    /// Whether values of this type are integers or booleans (casts to it truncate).
    pub fn is_integer(self) -> bool {
        matches!(
            self,
            DType::Int8 | DType::Int4 | DType::Int32 | DType::Int64 | DType::Bool
        )
    }

    /// Storage size of one element in bits.
    pub fn bits(self) -> u64 {
        match self {
            DType::Int64 => 64,
            DType::Fp32 | DType::Tf32 | DType::Int32 => 32,
            DType::Bf16 | DType::Fp16 => 16,
            DType::Fp8 | DType::Int8 | DType::Bool => 8,
            DType::Int4 => 4,
        }
    }

    /// Lower-case name, as used on the command line and in files.
    pub fn name(self) -> &'static str {
        match self {
            DType::Fp32 => "fp32",
            DType::Tf32 => "tf32",
            DType::Bf16 => "bf16",
            DType::Fp16 => "fp16",
            DType::Fp8 => "fp8",
            DType::Int8 => "int8",
            DType::Int4 => "int4",
            DType::Int32 => "int32",
            DType::Int64 => "int64",
            DType::Bool => "bool",
        }
    }

    /// Bytes occupied by `elems` packed elements: `ceil(elems · bits / 8)`, checked.
    pub fn bytes_for(self, elems: u64) -> Result<u64> {
        let bits = elems
            .checked_mul(self.bits())
            .ok_or_else(|| CoreError::overflow(format!("{elems} elements of {self} in bits")))?;
        Ok(bits.div_ceil(8))
    }

    /// Parse a dtype name (case-insensitive; `float32`/`f32`, `float16`/`f16`/`half`, `bfloat16` accepted).
    pub fn parse(s: &str) -> Result<Self> {
        let l = s.trim().to_ascii_lowercase();
        let d = match l.as_str() {
            "fp32" | "f32" | "float32" | "float" => DType::Fp32,
            "tf32" => DType::Tf32,
            "bf16" | "bfloat16" => DType::Bf16,
            "fp16" | "f16" | "float16" | "half" => DType::Fp16,
            "fp8" | "f8" | "float8" | "e4m3" | "e5m2" => DType::Fp8,
            "int8" | "i8" | "s8" | "u8" | "uint8" => DType::Int8,
            "int4" | "i4" | "s4" | "u4" | "uint4" => DType::Int4,
            "int32" | "i32" => DType::Int32,
            "int64" | "i64" => DType::Int64,
            "bool" => DType::Bool,
            _ => {
                return Err(CoreError::Unknown {
                    kind: "dtype".into(),
                    name: s.to_string(),
                    valid: DType::ALL.map(|d| d.name()).join(", "),
                })
            }
        };
        Ok(d)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for DType {
    type Err = CoreError;
    fn from_str(s: &str) -> Result<Self> {
        DType::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int4_counts_bits_not_bytes() {
        // 3 int4 elements = 12 bits = 1.5 bytes -> 2 bytes when packed.
        assert_eq!(DType::Int4.bytes_for(3).unwrap(), 2);
        // 4096 int4 elements = 2048 bytes.
        assert_eq!(DType::Int4.bytes_for(4096).unwrap(), 2048);
        assert_eq!(DType::Fp16.bytes_for(10).unwrap(), 20);
        assert_eq!(DType::Tf32.bytes_for(1).unwrap(), 4);
        // Index types: 3 int64 token ids = 24 bytes; a bool mask is one byte per element.
        assert_eq!(DType::Int64.bytes_for(3).unwrap(), 24);
        assert_eq!(DType::Bool.bytes_for(5).unwrap(), 5);
    }

    #[test]
    fn parse_round_trips_and_rejects_unknown() {
        for d in DType::ALL {
            assert_eq!(DType::parse(d.name()).unwrap(), d);
        }
        let e = DType::parse("fp64").unwrap_err().to_string();
        assert!(e.contains("fp64") && e.contains("bf16"), "{e}");
    }

    #[test]
    fn bytes_overflow_is_an_error() {
        assert!(DType::Fp32.bytes_for(u64::MAX / 2).is_err());
    }
}
