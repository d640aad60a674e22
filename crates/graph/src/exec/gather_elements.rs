//! ONNX `GatherElements` on the CPU: every output element reads the data element at its own
//! coordinates with the one on the indexed axis replaced by its index (RoBERTa's token types
//! by position, DeBERTa's relative-position scores). One pass over the indices, odometer
//! coordinates, a range check per index. Left out: threads and vector gathers (the tensors
//! exporters write here are a few thousand elements).

/// `out[i] = data[i with iₐ replaced by idx[i]]` for every coordinate `i` of `is` (row-major),
/// `data` of shape `ds`, `idx` of shape `is` (same rank, `is[k] ≤ ds[k]` off axis `a`, as the
/// IR's shape check guarantees). Indices are held as f32 (exact up to 2^24); a negative one
/// counts from the end of axis `a`. Errors on an index outside `[−len, len)` or not whole.
pub(crate) fn gather_elements(
    data: &[f32],
    ds: &[usize],
    idx: &[f32],
    is: &[usize],
    a: usize,
    out: &mut Vec<f32>,
) -> Result<(), String> {
    let rank = ds.len();
    let mut stride = vec![1usize; rank];
    for k in (0..rank.saturating_sub(1)).rev() {
        stride[k] = stride[k + 1] * ds[k + 1];
    }
    let len = ds[a] as i64;
    let mut at = vec![0usize; rank];
    out.clear();
    for &v in idx {
        let i = v as i64;
        let r = if i < 0 { i + len } else { i };
        if v.fract() != 0.0 || r < 0 || r >= len {
            return Err(format!("index {v} is outside [-{len}, {len}) on axis {a}"));
        }
        let off: usize = at
            .iter()
            .zip(&stride)
            .enumerate()
            .map(|(k, (c, s))| if k == a { r as usize * s } else { c * s })
            .sum();
        out.push(data[off]);
        for k in (0..rank).rev() {
            at[k] += 1;
            if at[k] < is[k] {
                break;
            }
            at[k] = 0;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ONNX's two documented examples, checked by hand.
    #[test]
    fn the_onnx_examples() {
        // axis 1: data [[1, 2], [3, 4]], indices [[0, 0], [1, 0]] → [[1, 1], [4, 3]]
        // (row 0 reads columns 0, 0; row 1 reads columns 1, 0).
        let mut out = vec![];
        gather_elements(
            &[1., 2., 3., 4.],
            &[2, 2],
            &[0., 0., 1., 0.],
            &[2, 2],
            1,
            &mut out,
        )
        .unwrap();
        assert_eq!(out, [1., 1., 4., 3.]);
        // axis 0: data [[1,2,3],[4,5,6],[7,8,9]], indices [[1,2,0],[2,0,0]] →
        // [[4,8,3],[7,2,3]] (column j reads row indices[.., j]).
        let d: Vec<f32> = (1..=9).map(|v| v as f32).collect();
        gather_elements(&d, &[3, 3], &[1., 2., 0., 2., 0., 0.], &[2, 3], 0, &mut out).unwrap();
        assert_eq!(out, [4., 8., 3., 7., 2., 3.]);
    }

    /// Negative indices count from the end; smaller index extents off the axis read the
    /// leading part of data; out-of-range and fractional indices are errors.
    #[test]
    fn negative_partial_and_out_of_range() {
        // data [[0,1,2],[3,4,5]] (shape [2, 3]), axis 1, indices [[-1], [-3]] (shape [2, 1])
        // → [[2], [3]]: row 0 column 2, row 1 column 0.
        let d: Vec<f32> = (0..6).map(|v| v as f32).collect();
        let mut out = vec![];
        gather_elements(&d, &[2, 3], &[-1., -3.], &[2, 1], 1, &mut out).unwrap();
        assert_eq!(out, [2., 3.]);
        // Indices of shape [1, 2] on axis 0: only row 0's coordinates off the axis.
        gather_elements(&d, &[2, 3], &[1., 0.], &[1, 2], 0, &mut out).unwrap();
        assert_eq!(out, [3., 1.]);
        for bad in [3.0, -4.0, 0.5] {
            let e = gather_elements(&d, &[2, 3], &[bad, 0.], &[2, 1], 1, &mut out).unwrap_err();
            assert!(e.contains("outside [-3, 3) on axis 1"), "{e}");
        }
    }
}
